"""The workbench as a person uses it, in a real browser: Debian's headless Chromium driven by Selenium (chromium and
chromium-driver come from ``scripts/setup.sh``), against ``modular-rag ui``'s app served by uvicorn on a free
loopback port. Asks a demo question, opens the cited passage, compares two configs, gives feedback, exports it and
runs ``eval`` on the export; saves the screenshot the README shows (``docs/ui.png``). Evaluates two configs on the
bundled demo set, reads the chart and opens a cell's run (``docs/ui-evaluate.png``)."""

from __future__ import annotations

import json
import shutil
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from modular_rag import template_path
from modular_rag.config import load_config

pytestmark = pytest.mark.integration

QUESTION = "What does error code E07 mean on the e-bike display?"
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "ui.png"
EVALUATE_SCREENSHOT = SCREENSHOT.with_name("ui-evaluate.png")
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
DRIVER = shutil.which("chromedriver")

if CHROMIUM is None or DRIVER is None:
    pytest.skip(
        "no headless Chromium: install Debian's chromium and chromium-driver (scripts/setup.sh does, as root)",
        allow_module_level=True,
    )
webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is not installed (the dev extra has it)")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def server(demo_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """The workbench over a copy of the demo index with two LLM-free configs, served on a free loopback port."""
    import uvicorn

    from modular_rag.ui import Workbench, create_app
    from modular_rag.ui.workbench import find_indexes

    index = tmp_path_factory.mktemp("ui-browser") / "demo"
    shutil.copytree(demo_dir, index)
    linear = load_config(template_path("linear")).to_dict()
    bm25 = json.loads(json.dumps(linear))
    bm25["name"] = "linear-bm25"
    bm25["operators"]["retrieve"] = {"name": "bm25", "params": {"k": 10}}
    bench = Workbench({"linear": load_config(linear), "linear-bm25": load_config(bm25)}, find_indexes(index))
    port = _free_port()
    config = uvicorn.Config(create_app(bench), host="127.0.0.1", port=port, log_level="warning")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not uv.started:
        if time.monotonic() > deadline or not thread.is_alive():
            pytest.fail("uvicorn did not start the workbench within 30 s")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}", index
    uv.should_exit = True
    thread.join(timeout=10)


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    from selenium.webdriver.chrome.options import Options
    from selenium.webdriver.chrome.service import Service

    options = Options()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1360,1000"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(str(DRIVER)), options=options)
    yield driver
    driver.quit()


def _wait(browser: Any, css: str, timeout: float = 60) -> Any:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(browser, timeout).until(ec.visibility_of_element_located((By.CSS_SELECTOR, css)))


def _ask(browser: Any, question: str) -> None:
    from selenium.webdriver.common.by import By

    box = browser.find_element(By.ID, "question")
    box.clear()
    box.send_keys(question)
    browser.find_element(By.ID, "ask").click()


def test_ask_cite_compare_feedback_export_eval(
    server: tuple[str, Path], browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from selenium.webdriver.common.by import By

    url, index = server
    browser.get(url + "/")
    _ask(browser, QUESTION)
    citation = _wait(browser, "a.citation")
    assert browser.find_element(By.CSS_SELECTOR, ".answer-text").text == "Error E07 means speed sensor signal lost [1]."
    assert citation.text == "E-bike display error E07"
    nodes = [li.text for li in browser.find_elements(By.CSS_SELECTOR, "#nodes li")]
    assert [line.split("]")[0] for line in nodes] == ["[retrieve", "[context", "[generate"]
    assert browser.find_element(By.CSS_SELECTOR, "#node-generate").get_attribute("class") == "node step ran"
    assert "total:" in browser.find_element(By.ID, "ledger").text

    citation.click()  # the cited passage, its quoted sentence marked, the attribution check's verdict
    passage = _wait(browser, "#passage")
    assert passage.find_element(By.TAG_NAME, "mark").text == "Error E07 means speed sensor signal lost."
    assert "attribution check: supported" in passage.text
    SCREENSHOT.parent.mkdir(exist_ok=True)
    browser.save_screenshot(str(SCREENSHOT))

    browser.find_element(By.CSS_SELECTOR, "input[name=verdict][value=right]").click()
    browser.find_element(By.ID, "send-feedback").click()
    done = _wait(browser, "#feedback-done")
    assert str(index / "feedback.sqlite") in done.text

    _ask(browser, "?!")  # bad input: a clear message on the page, and the server serves on
    assert "has no words" in _wait(browser, "#message").text
    _ask(browser, "How long is the frame warranty?")
    _wait(browser, "#feedback")
    assert not browser.find_element(By.ID, "message").is_displayed()

    browser.get(url + "/compare")
    browser.find_element(By.ID, "question").send_keys(QUESTION)
    browser.find_element(By.ID, "compare").click()
    _wait(browser, "table.evidence")
    columns = browser.find_elements(By.CSS_SELECTOR, ".run-col")
    assert [c.get_attribute("data-config") for c in columns] == ["linear", "linear-bm25"]
    assert all("E07" in c.find_element(By.CSS_SELECTOR, ".answer-text").text for c in columns)

    out = tmp_path / "feedback-set"
    browser.get(url + "/feedback")
    assert QUESTION in browser.find_element(By.ID, "feedback-table").text
    browser.find_element(By.ID, "export-out").send_keys(str(out))
    browser.find_element(By.ID, "export").click()
    assert "1 questions" in _wait(browser, "#export-done").text

    from modular_rag.cli import main

    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path / "home"))
    report = tmp_path / "report"
    assert main(["eval", "--dataset", str(out), "--config", str(template_path("linear")), "--out", str(report)]) == 0
    (row,) = json.loads((report / "results.json").read_text())["results"]
    assert row["queries"] == 1 and row["contains"] == 1.0  # the question a person judged right is answered again


def test_evaluate_two_configs_read_the_chart_and_open_a_cell(
    server: tuple[str, Path], browser: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from selenium.webdriver.common.by import By

    monkeypatch.setenv("MODULAR_RAG_HOME", str(tmp_path / "home"))  # the demo set's evaluation index
    url, _ = server
    browser.get(url + "/evaluate")
    boxes = browser.find_elements(By.CSS_SELECTOR, "input[name=configs]")
    for box in boxes:  # none chosen: a clear message, and the server serves on
        if box.is_selected():
            box.click()
    browser.find_element(By.ID, "evaluate").click()
    assert "0 distinct configs chosen; evaluate one to 4" in _wait(browser, "#message").text
    for box in boxes:
        box.click()
    assert browser.find_element(By.ID, "dataset").get_attribute("value") == "demo"
    assert browser.find_element(By.ID, "limit").get_attribute("value") == "20"
    browser.find_element(By.ID, "evaluate").click()
    _wait(browser, "#eval-chart svg.chart")
    assert not browser.find_element(By.ID, "message").is_displayed()
    dots = browser.find_elements(By.CSS_SELECTOR, "#eval-chart g.dot")
    assert [d.get_attribute("data-config") for d in dots] == ["linear", "linear-bm25"]
    summary = browser.find_elements(By.CSS_SELECTOR, "table.eval-summary tbody tr")
    assert [r.get_attribute("data-config") for r in summary] == ["linear", "linear-bm25"]
    heads = browser.find_element(By.CSS_SELECTOR, "table.eval-summary thead").text.split()
    assert heads[:3] == ["config", "right", "nDCG@10"]
    cells = browser.find_elements(By.CSS_SELECTOR, "#eval-questions button.cell")
    assert len(cells) == 40 and {c.text for c in cells} <= {"right", "wrong", "error"}
    cell = next((c for c in cells if c.text == "wrong"), cells[0])
    cell.click()
    run = _wait(browser, "#eval-run")
    assert f"judged {cell.text}" in run.text and "Gold documents" in run.text
    assert run.find_element(By.TAG_NAME, "h3").text.startswith(cell.get_attribute("data-config") + ": ")
    browser.execute_script("window.scrollTo(0, 0)")
    browser.save_screenshot(str(EVALUATE_SCREENSHOT))
