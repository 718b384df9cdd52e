"""The web page in headless Chromium (Debian's chromium + chromedriver, driven by Selenium with
the driver path given, so Selenium Manager downloads nothing): search, stage scores, the
trace timeline, an answer with clickable citations, the reports page; a screenshot goes to
docs/service-screenshot.png with INTENTRANK_SCREENSHOT=1 (else to the test's tmp_path, so a
test run leaves the checkout as it was)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from service_helpers import KEY, ScriptedLLM, Server, has_answer_stage, small_index

from intentrank.llm.client import LLMClient
from intentrank.service import ServiceSettings, create_app
from intentrank.service.auth import ApiKey, KeyStore, hash_key

CHROMIUM, DRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
SCREENSHOT = Path(__file__).resolve().parents[1] / "docs" / "service-screenshot.png"
REPORTS = Path(__file__).resolve().parents[1] / "docs" / "ablation"

pytestmark = pytest.mark.skipif(
    not (CHROMIUM.exists() and DRIVER.exists()),
    reason="Debian's chromium and chromium-driver are not installed (scripts/setup.sh "
           "installs them where apt-get is available)")


@pytest.fixture(scope="module")
def page_server(data_dir, tmp_path_factory):
    pytest.importorskip("selenium")
    index = small_index(data_dir, tmp_path_factory.mktemp("browser") / "cranfield300")
    pipelines = {"rrf": "rrf", "bm25": "bm25"}
    if has_answer_stage():
        pipelines["qa"] = ["bm25", {"cutoff": 5}, {"answer": {"top_k": 3, "abstain": "llm"}}]
    settings = ServiceSettings(
        indexes={"cranfield": index}, pipelines=pipelines, access_log=False,
        keys=KeyStore([ApiKey("browser", hash_key(KEY))]), report_dirs=[REPORTS],
        llm=LLMClient(ScriptedLLM(), cache=False, retries=0))
    with Server(create_app(settings)) as server:
        yield server.url


@pytest.fixture(scope="module")
def browser():
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    os.environ.setdefault("SE_OFFLINE", "true")  # never let Selenium Manager go online
    options = webdriver.ChromeOptions()
    options.binary_location = str(CHROMIUM)
    for arg in ("--headless=new", "--no-sandbox", "--disable-background-networking",
                "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1280,1500"):
        options.add_argument(arg)
    driver = webdriver.Chrome(service=Service(executable_path=str(DRIVER)), options=options)
    driver.set_page_load_timeout(30)
    yield driver
    driver.quit()


def _wait(driver, condition, timeout: float = 30):  # noqa: ANN001, ANN202
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(condition)


def _screenshot(browser, tmp_path: Path) -> None:
    path = SCREENSHOT if os.environ.get("INTENTRANK_SCREENSHOT") == "1" else \
        tmp_path / SCREENSHOT.name
    browser.save_screenshot(str(path))


def test_search_renders_results_scores_and_trace(page_server, browser, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(f"{page_server}/#key={KEY}")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#pipeline option"))
    assert "#key" not in browser.current_url  # the key leaves the address bar
    Select(browser.find_element(By.ID, "pipeline")).select_by_value("rrf")
    browser.find_element(By.ID, "top-k").clear()
    browser.find_element(By.ID, "top-k").send_keys("5")
    browser.find_element(By.ID, "question").send_keys("boundary layer flow over a flat plate")
    browser.find_element(By.ID, "search-btn").click()
    _wait(browser, lambda d: len(d.find_elements(By.CSS_SELECTOR, "#results li.result")) == 5)
    assert "5 results from rrf" in browser.find_element(By.ID, "status").text
    first = browser.find_element(By.CSS_SELECTOR, "#results li.result")
    marks = {m.text.lower() for m in first.find_elements(By.TAG_NAME, "mark")}
    assert marks & {"boundary", "layer", "flow", "flat", "plate"}
    first.find_element(By.TAG_NAME, "summary").click()
    stages = [row.find_elements(By.TAG_NAME, "td")[0].text
              for row in first.find_elements(By.CSS_SELECTOR, "table.stages tr")[1:]]
    assert stages == ["rrf/bm25", "rrf/dense", "rrf"]
    rows = browser.find_elements(By.CSS_SELECTOR, "#timeline .trace-row")
    assert [r.find_element(By.CLASS_NAME, "name").text for r in rows] == [
        "rrf", "rrf/bm25", "rrf/dense"]  # the fusion, then its branches below it
    _screenshot(browser, tmp_path)


def test_conversation_mode_sends_the_turns(page_server, browser):
    from selenium.webdriver.common.by import By

    browser.get(f"{page_server}/")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#pipeline option"))
    browser.find_element(By.ID, "conv-mode").click()
    browser.find_element(By.ID, "turns").send_keys("Q: What is a boundary layer?\n"
                                                   "A: A thin layer near a wall.")
    browser.find_element(By.ID, "question").send_keys("How does it grow?")
    browser.find_element(By.ID, "search-btn").click()
    _wait(browser, lambda d: "results from" in d.find_element(By.ID, "status").text)


def test_answer_with_clickable_citations(page_server, browser, tmp_path):
    if not has_answer_stage():
        pytest.skip("the 'answer' stage is not registered yet: the page's answer part is "
                    "untested here (the Answer button stays disabled without it)")
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import Select

    browser.get(f"{page_server}/")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#pipeline option"))
    Select(browser.find_element(By.ID, "pipeline")).select_by_value("qa")
    question = browser.find_element(By.ID, "question")
    question.clear()
    question.send_keys("boundary layer flow over a flat plate")
    browser.find_element(By.ID, "answer-btn").click()
    _wait(browser, lambda d: d.find_element(By.ID, "answer").is_displayed())
    link = browser.find_element(By.CSS_SELECTOR, "#answer-text a.cite")
    assert link.text in ("[1]", "[2]", "[3]")  # cited by the cross-encoder (post hoc)
    support = browser.find_element(By.CSS_SELECTOR, f"#cite-{link.text[1]} .support")
    assert support.text  # the passage sentence behind the citation
    link.click()
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "li.result.flash"))
    _screenshot(browser, tmp_path)


def test_reports_page_lists_and_shows_reports(page_server, browser):
    from selenium.webdriver.common.by import By

    browser.get(f"{page_server}/ui/reports")
    _wait(browser, lambda d: d.find_elements(By.CSS_SELECTOR, "#report-list a"))
    names = [a.text for a in browser.find_elements(By.CSS_SELECTOR, "#report-list a")]
    assert names == sorted(p.name for p in REPORTS.glob("*.html"))
    browser.find_elements(By.CSS_SELECTOR, "#report-list a")[0].click()
    _wait(browser, lambda d: d.find_element(By.ID, "report-frame").get_attribute("src")
          .startswith("blob:"))
    browser.switch_to.frame(browser.find_element(By.ID, "report-frame"))
    _wait(browser, lambda d: d.find_elements(By.TAG_NAME, "table"))
    browser.switch_to.default_content()

