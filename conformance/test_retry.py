"""Checks that the suite's retry of the prepared-local scenarios
(``retried_when_callback_processes_lapse`` in suite.py) cannot turn a wrong
result into a pass: only a failure that comes with a lapse of the
scenario's own worker's callback process is run again, and the last
attempt's failure always fails the scenario. No server is needed; the
runner (conformance/run) runs this before the suite.

Usage: python conformance/test_retry.py
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import types
import unittest

import suite
from suite import CALLBACK_PROCESS_LAPSES, QUEUE, prepared_queue, retried_when_callback_processes_lapse


class Scenario:
    """A scenario that answers `results[attempt - 1]` (an exception is
    raised), noting a lapse on `lapse_queue(attempt)` first where that is
    not None, as the SDK's lapsed callback would."""

    def __init__(self, results, lapse_queue=lambda attempt: None) -> None:
        self.results = results
        self.lapse_queue = lapse_queue
        self.attempts = 0
        self.__name__ = "prepared_scenario"

    async def __call__(self, _suite, attempt: int):
        self.attempts += 1
        queue = self.lapse_queue(attempt)
        if queue is not None:
            CALLBACK_PROCESS_LAPSES.append((queue, "start: TimeoutError after 5.0s"))
        result = self.results[attempt - 1]
        if isinstance(result, BaseException):
            raise result
        return result


def run(scenario: Scenario, tries: int = 3) -> tuple[object, str]:
    """Runs `scenario` under the retry: its answer (or the exception it
    ended with) and what the retry printed."""
    wrapped = retried_when_callback_processes_lapse(tries=tries)(scenario)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):
        try:
            answer = asyncio.run(wrapped(None))
        except Exception as error:  # the scenario's own failure
            answer = error
    return answer, printed.getvalue()


class RetryTest(unittest.TestCase):
    def setUp(self) -> None:
        CALLBACK_PROCESS_LAPSES.clear()

    def test_a_wrong_result_without_a_lapse_fails_at_once(self) -> None:
        wrong = AssertionError("result {'doubled': 41}")
        scenario = Scenario([wrong, "passed", "passed"])
        answer, printed = run(scenario)
        self.assertIs(answer, wrong)
        self.assertEqual(scenario.attempts, 1)
        self.assertEqual(printed, "")

    def test_another_workers_lapse_excuses_nothing(self) -> None:
        wrong = AssertionError("the callbacks ran (2, 1) times")
        scenario = Scenario([wrong, "passed", "passed"], lapse_queue=lambda attempt: QUEUE)
        answer, _ = run(scenario)
        self.assertIs(answer, wrong)
        self.assertEqual(scenario.attempts, 1)

    def test_a_wrong_result_that_stays_fails_on_the_last_attempt_saying_so(self) -> None:
        wrong = [AssertionError(f"wrong {n}") for n in range(3)]
        scenario = Scenario(wrong, lapse_queue=prepared_queue)
        answer, printed = run(scenario, tries=3)
        self.assertIs(answer, wrong[2])
        self.assertEqual(scenario.attempts, 3)
        self.assertIn("attempt 3 of 3 failed (AssertionError: wrong 2)", printed)
        self.assertIn("not run again: the scenario fails", printed)

    def test_a_lapse_of_its_own_worker_runs_it_again_naming_the_cause(self) -> None:
        lapsed = TimeoutError("get_result timed out")
        scenario = Scenario([lapsed, "passed"],
                            lapse_queue=lambda attempt: prepared_queue(attempt) if attempt == 1 else None)
        answer, printed = run(scenario)
        self.assertEqual(answer, "passed")
        self.assertEqual(scenario.attempts, 2)
        self.assertIn("attempt 1 of 3 failed (TimeoutError: get_result timed out)", printed)
        self.assertIn(f"callback processes on {prepared_queue(1)} lapsed (start: TimeoutError after 5.0s)",
                      printed)
        self.assertIn("running it again", printed)

    def test_a_lapse_is_charged_to_the_queue_of_its_callbacks_worker(self) -> None:
        # A process handle never started: its stop waits the SDK's own 5 s
        # for stop evidence that cannot come, as a callback too slow to
        # answer would, and the suite's observer notes that lapse.
        class Invocation:
            info = types.SimpleNamespace(task_queue="conformance-prepared-local-attempt-2")

            def serialize(self) -> bytes:
                return b"unused"

        handle = suite.activity_process.SupervisedCallback(Invocation())
        with self.assertRaises(TimeoutError):
            asyncio.run(handle.stop())
        self.assertEqual(len(CALLBACK_PROCESS_LAPSES), 1, CALLBACK_PROCESS_LAPSES)
        queue, text = CALLBACK_PROCESS_LAPSES[0]
        self.assertEqual(queue, "conformance-prepared-local-attempt-2")
        self.assertTrue(text.startswith("stop: TimeoutError after 5."), text)


if __name__ == "__main__":
    unittest.main()
