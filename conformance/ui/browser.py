"""The operator console in a real browser: headless Chromium through
WebDriver (Selenium, pinned in requirements.txt) against a dwserver with
auth on, filled by the conformance workflows through the published SDK.

Usage: python browser.py BASE_URL SCREENSHOT_DIR

The runner (conformance/ui/run) starts dwserver with the tokens below and
`DW_V2_LIMIT_PENDING_ACTIVITIES=20`. Each check prints PASS or FAIL; the
last line is "ui-browser: N passed, M failed". Screenshots of every page
go to SCREENSHOT_DIR.
"""

from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import threading
import time
import traceback
import urllib.parse
import uuid

import httpx
from durable_workflow import Client, Worker
from selenium import webdriver
from selenium.common.exceptions import NoAlertPresentException
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
from workflows import ACTIVITIES, QUEUE, WORKFLOWS  # noqa: E402

ADMIN_TOKEN = os.environ.get("DW_UI_TEST_ADMIN_TOKEN", "ui-admin-token")
PENDING_ACTIVITIES = int(os.environ.get("DW_V2_LIMIT_PENDING_ACTIVITIES", "20"))
HOSTILE_ID = "<script>alert('dw')</script>"
DEADLINE = 60.0


def new_id(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class Filled:
    """The runs the checks look at."""

    journey = ""
    fan_out = ""
    sleeper = ""


async def wait_for(what: str, predicate, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while True:
        value = await predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.2)


async def fill(base_url: str, stop: asyncio.Event, filled: threading.Event) -> None:
    """Runs a worker and starts the runs; keeps the worker until `stop`."""
    client = Client(base_url, namespace="default", token=ADMIN_TOKEN, timeout=30.0)
    http = httpx.AsyncClient(
        base_url=base_url,
        headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "X-Namespace": "default",
                 "X-Durable-Workflow-Control-Plane-Version": "2"},
        timeout=30.0,
    )
    worker = Worker(client, task_queue=QUEUE, workflows=WORKFLOWS, activities=ACTIVITIES,
                    worker_id=f"ui-browser-{os.getpid()}", poll_timeout=5.0, shutdown_timeout=10.0)
    running = asyncio.create_task(worker.run())

    async def history_types(wid: str) -> list[str]:
        response = await http.get(f"/api/workflows/{urllib.parse.quote(wid, safe='')}")
        run_id = response.json()["run_id"]
        history = await client.get_history(wid, run_id, page_size=1000)
        return [e["event_type"] for e in history["events"]]

    async def status(wid: str) -> str:
        response = await http.get(f"/api/workflows/{urllib.parse.quote(wid, safe='')}")
        return response.json().get("status", "")

    try:
        Filled.journey = new_id("journey")
        await client.start_workflow(workflow_type="journey", task_queue=QUEUE,
                                    workflow_id=Filled.journey, input=["browser"])
        Filled.fan_out = new_id("fanout")
        await client.start_workflow(workflow_type="fan_out", task_queue=QUEUE,
                                    workflow_id=Filled.fan_out, input=[PENDING_ACTIVITIES + 5])
        Filled.sleeper = new_id("sleeper")
        await client.start_workflow(workflow_type="sleeper", task_queue=QUEUE,
                                    workflow_id=Filled.sleeper)
        await client.start_workflow(workflow_type="quick", task_queue=QUEUE,
                                    workflow_id=HOSTILE_ID, input=["<b>hostile input</b>"])
        for i in range(3):
            await client.start_workflow(workflow_type="quick", task_queue=QUEUE,
                                        workflow_id=new_id("quick"), input=[f"run {i}"])

        async def journey_waits():
            return "TimerFired" in await history_types(Filled.journey)

        await wait_for("the journey's timer to fire", journey_waits)
        await wait_for("the fan-out to fail", lambda: _equals(status(Filled.fan_out), "failed"))
        await wait_for("the sleeper's timer", lambda: _contains(history_types(Filled.sleeper), "TimerScheduled"))
        await wait_for("the hostile run to complete", lambda: _equals(status(HOSTILE_ID), "completed"))
        filled.set()
        while not stop.is_set():
            await asyncio.sleep(0.2)
    finally:
        filled.set()
        await worker.stop()
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        await http.aclose()
        await client.aclose()


async def _equals(value, expected):
    return (await value) == expected


async def _contains(value, expected):
    return expected in await value


def browser(profile: str) -> webdriver.Chrome:
    options = webdriver.ChromeOptions()
    options.binary_location = os.environ.get("DW_UI_CHROMIUM", "/usr/bin/chromium")
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1280,1000"]:
        options.add_argument(flag)
    service = Service(executable_path=os.environ.get("DW_UI_CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(options=options, service=service)


def wait_until(what: str, condition, timeout: float = DEADLINE):
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.2)


class Checks:
    def __init__(self, base: str, shots: str, driver: webdriver.Chrome) -> None:
        self.base = base
        self.shots = shots
        self.driver = driver

    def open(self, path: str) -> None:
        self.driver.get(self.base + path)

    def shot(self, name: str) -> None:
        """The whole page (up to 2,400 px tall), not only the window."""
        height = self.driver.execute_script("return document.documentElement.scrollHeight")
        self.driver.set_window_size(1280, min(int(height) + 120, 2400))
        try:
            self.driver.save_screenshot(os.path.join(self.shots, f"{name}.png"))
        finally:
            self.driver.set_window_size(1280, 1000)

    def run_link(self, wid: str) -> str:
        return "/ui/run?" + urllib.parse.urlencode({"ns": "default", "wf": wid})

    def a_page_without_a_token_redirects_to_sign_in(self) -> str:
        self.driver.delete_all_cookies()
        self.open("/ui/runs")
        url = self.driver.current_url
        assert "/ui/sign-in" in url and "next=%2Fui%2Fruns" in url, url
        self.shot("sign-in")
        box = self.driver.find_element(By.NAME, "token")
        box.send_keys(ADMIN_TOKEN)
        box.submit()
        wait_until("the runs page", lambda: self.driver.current_url.endswith("/ui/runs"))
        cookie = self.driver.get_cookie("dwserver_console")
        assert cookie and cookie["httpOnly"] and cookie.get("sameSite") == "Strict", cookie
        return f"redirected to {urllib.parse.urlparse(url).path}; signed in, cookie HttpOnly SameSite=Strict"

    def the_run_list_shows_the_runs(self) -> str:
        self.open("/ui/runs")
        listed = [a.text for a in self.driver.find_elements(By.CSS_SELECTOR, "td.wf a")]
        for wid in [Filled.journey, Filled.fan_out, Filled.sleeper, HOSTILE_ID]:
            assert wid in listed, (wid, listed)
        self.shot("runs")
        return f"{len(listed)} runs listed"

    def a_hostile_workflow_id_renders_as_text(self) -> str:
        self.open("/ui/runs")
        assert not self.driver.find_elements(By.TAG_NAME, "script")
        try:
            self.driver.switch_to.alert
            raise AssertionError("an alert opened")
        except NoAlertPresentException:
            pass
        self.open(self.run_link(HOSTILE_ID))
        title = self.driver.find_element(By.CSS_SELECTOR, "h1 span.wf").text
        assert title == HOSTILE_ID, title
        assert not self.driver.find_elements(By.TAG_NAME, "script")
        assert not self.driver.find_elements(By.TAG_NAME, "b"), "payload markup was rendered"
        self.shot("hostile-run")
        return f"shown as the text {title!r}, no script element, no alert"

    def a_runs_timeline_shows_activity_and_timer_spans(self) -> str:
        self.open(self.run_link(Filled.journey))
        activities = self.driver.find_elements(By.CSS_SELECTOR, "svg.timeline g.span.activity")
        timers = self.driver.find_elements(By.CSS_SELECTOR, "svg.timeline g.span.timer")
        assert activities and timers, (len(activities), len(timers))
        bars = self.driver.find_elements(By.CSS_SELECTOR, "table.limits svg.meter")
        assert len(bars) == 5, len(bars)
        self.shot("run-timeline")
        return f"{len(activities)} activity and {len(timers)} timer span(s); 5 limit meters"

    def a_structural_limit_failure_is_in_the_exceptions_table(self) -> str:
        self.open("/ui/exceptions?ns=default&category=structural_limit")
        rows = self.driver.find_elements(By.CSS_SELECTOR, "table.exceptions tbody tr")
        found = None
        for row in rows:
            cells = {c.get_attribute("class"): c.text for c in row.find_elements(By.TAG_NAME, "td")}
            if cells.get("wf") == Filled.fan_out:
                found = cells
        assert found, [r.text for r in rows]
        assert found["category"] == "structural_limit", found
        assert found["kind"] == "pending_activity_count", found
        assert found["bound"] == str(PENDING_ACTIVITIES), found
        assert int(found["value"]) >= PENDING_ACTIVITIES, found
        self.shot("exceptions")
        self.driver.find_element(By.LINK_TEXT, Filled.fan_out).click()
        wait_until("the failed run's page", lambda: "#failure" in self.driver.current_url)
        detail = self.driver.find_element(By.CSS_SELECTOR, "tr.failure-detail td.kind").text
        assert detail == "pending_activity_count", detail
        marker = self.driver.find_element(By.CSS_SELECTOR, "svg.timeline text.marker-label").text
        expected = f"pending_activity_count {found['value']} / {found['bound']}"
        assert expected in marker, (expected, marker)
        self.shot("run-failure")
        return f"structural_limit pending_activity_count {found['value']}/{found['bound']}, linked to its failure"

    def a_cancel_from_the_ui_cancels_the_run(self) -> str:
        self.open(self.run_link(Filled.sleeper))
        self.driver.find_element(By.PARTIAL_LINK_TEXT, "cancel").click()
        wait_until("the confirmation", lambda: "/ui/run/confirm" in self.driver.current_url)
        self.shot("confirm-cancel")
        self.driver.find_element(By.NAME, "reason").send_keys("cancelled from the browser test")
        self.driver.find_element(By.CSS_SELECTOR, "form.confirm button").click()
        wait_until("the run page after the cancel", lambda: "done=cancel" in self.driver.current_url)
        status = self.driver.find_element(By.CSS_SELECTOR, "h1 span.status").text
        assert status == "cancelled", status
        described = httpx.get(
            f"{self.base}/api/workflows/{Filled.sleeper}",
            headers={"Authorization": f"Bearer {ADMIN_TOKEN}", "X-Namespace": "default"},
        ).json()
        assert described["status"] == "cancelled", described
        self.shot("run-cancelled")
        return "the page and the API both say cancelled"

    def the_operations_page_charts_the_dw_series(self) -> str:
        def charted():
            self.open("/ui/operations?ns=default")
            return len(self.driver.find_elements(By.CSS_SELECTOR, "svg.chart polyline")) > 0

        wait_until("a charted series", charted, timeout=90)
        families = self.driver.find_elements(By.CSS_SELECTOR, "table.caches tbody tr")
        queues = [c.text for c in self.driver.find_elements(By.CSS_SELECTOR, "table.queues td:first-child")]
        assert QUEUE in queues, queues
        self.shot("operations")
        charts = len(self.driver.find_elements(By.CSS_SELECTOR, "svg.chart"))
        return f"{charts} charts, {len(families)} cache families, queue {QUEUE} listed"

    ORDER = [
        "a_page_without_a_token_redirects_to_sign_in",
        "the_run_list_shows_the_runs",
        "a_hostile_workflow_id_renders_as_text",
        "a_runs_timeline_shows_activity_and_timer_spans",
        "a_structural_limit_failure_is_in_the_exceptions_table",
        "a_cancel_from_the_ui_cancels_the_run",
        "the_operations_page_charts_the_dw_series",
    ]


def main(base_url: str, shots: str) -> int:
    os.makedirs(shots, exist_ok=True)
    stop = asyncio.Event()
    filled = threading.Event()
    loop = asyncio.new_event_loop()
    filler = threading.Thread(target=lambda: loop.run_until_complete(fill(base_url, stop, filled)))
    filler.start()
    passed = failed = 0
    try:
        if not filled.wait(timeout=180) or not Filled.sleeper:
            raise AssertionError("the workflows did not fill the server in time")
        with tempfile.TemporaryDirectory() as profile:
            driver = browser(profile)
            try:
                checks = Checks(base_url, shots, driver)
                for name in Checks.ORDER:
                    started = time.monotonic()
                    try:
                        detail = getattr(checks, name)()
                        passed += 1
                        print(f"  PASS {name} ({time.monotonic() - started:.1f}s): {detail}")
                    except Exception:
                        failed += 1
                        print(f"  FAIL {name} ({time.monotonic() - started:.1f}s)")
                        traceback.print_exc()
                        try:
                            checks.shot(f"failed-{name}")
                        except Exception:
                            pass
            finally:
                driver.quit()
    except Exception:
        failed += 1
        traceback.print_exc()
    finally:
        loop.call_soon_threadsafe(stop.set)
        filler.join(timeout=60)
    print(f"ui-browser: {passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1], sys.argv[2]))
