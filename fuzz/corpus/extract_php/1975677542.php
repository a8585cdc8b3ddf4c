<?php

namespace Database\Pruning;

/** Outside every [sources] glob: found only through composer.json's PSR-4 map. */
final class RunPruner
{
}
