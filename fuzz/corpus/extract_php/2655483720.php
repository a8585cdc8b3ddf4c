<?php

declare(strict_types=1);

namespace App\Support;

use Illuminate\Support\Facades\Cache;

final class WorkflowTaskPollRequestStore
{
    # A pending key and a short replay-result key per poll request.
    public function pending(string $namespace, string $requestId): string
    {
        return sprintf('server:workflow-task-poll-request:%s:%s', $namespace, $requestId);
    }

    public function result(string $namespace, string $requestId): string
    {
        return "server:workflow-task-poll-request:{$namespace}:result:$requestId";
    }
}
