"""`rl view` in a real browser (headless Chromium through Selenium, one session for the module):
the runs list and a comparison picked from it, a live run whose reward curve grows while the
test appends to its metrics.jsonl, a group of eight rollouts with its tokens shaded, an eval
sample, a comparison with its config diff, and path escapes answered with a refusal page."""

import pytest

from launcher.view.library import run_id
from tests.integration.browser import start_chromium, wait_until
from tests.integration.view_server import ViewServer
from tests.view_runs import append_metrics, make_run, write_eval, write_samples

pytestmark = pytest.mark.integration
SECRET = "TOP-SECRET-CONTENT"


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    base = tmp_path_factory.mktemp("browse")
    root = base / "outputs"
    a = make_run(root / "a", steps=8)
    write_samples(a, range(3))
    write_eval(a / "evals", 4)
    b = make_run(root / "b", steps=8, lr=1e-5, status="failed")
    live = make_run(root / "live", steps=3, live=True)
    (base / "secret.txt").write_text(SECRET)
    (root / "escape").symlink_to(base)
    ids = {name: run_id(path.resolve()) for name, path in (("a", a), ("b", b), ("live", live))}
    return root, ids


@pytest.fixture(scope="module")
def server(tree):
    root, _ = tree
    with ViewServer(str(root)) as running:
        yield running


@pytest.fixture(scope="module")
def browser():
    session = start_chromium()
    try:
        yield session
    finally:
        session.quit()


def css(session, selector):
    from selenium.webdriver.common.by import By

    return session.find_elements(By.CSS_SELECTOR, selector)


def points(session, panel: int = 0, trace: int = 0) -> int:
    return session.execute_script(
        f"const d = document.getElementById('panel-{panel}');"
        f"return d && d.data && d.data[{trace}] ? d.data[{trace}].x.length : -1;"
    )


def test_the_runs_list_and_a_comparison_picked_from_it(server, browser, tree):
    _, ids = tree
    browser.get(server.url)
    rows = wait_until(browser, lambda s: css(s, "#runs tbody tr"), what="the runs table")
    cells = {row.get_attribute("data-run"): row.text for row in rows}
    assert set(cells) == set(ids.values())
    assert "finished" in cells[ids["a"]] and "failed" in cells[ids["b"]]
    assert "running" in cells[ids["live"]] and "8 / 8" in cells[ids["a"]]
    for rid in (ids["a"], ids["b"]):
        css(browser, f"input[value='{rid}']")[0].click()
    css(browser, "#compare-button")[0].click()
    wait_until(browser, lambda s: "/compare?runs=" in s.current_url, what="the compare page")


def test_a_live_runs_curve_grows_while_we_watch(server, browser, tree):
    root, ids = tree
    browser.get(f"{server.base}/run/{ids['live']}")
    wait_until(browser, lambda s: points(s) == 3, what="the reward curve's 3 points")
    assert "running" in css(browser, "#run-status")[0].text
    append_metrics(root / "live", range(3, 6))
    with (root / "live" / "logs" / "trainer.log").open("a") as log:
        log.write("trainer: a line written while we watch\n")
    wait_until(browser, lambda s: points(s) == 6, what="the curve to grow to 6 points")
    assert css(browser, "#run-step")[0].text == "6"
    trainer_log = "pre.log[data-log='trainer']"
    wait_until(browser, lambda s: "while we watch" in css(s, trainer_log)[0].text, what="the log")


def test_a_group_of_eight_rollouts_side_by_side(server, browser, tree):
    _, ids = tree
    browser.get(f"{server.base}/run/{ids['a']}/rollouts?step=1")
    group = wait_until(browser, lambda s: css(s, "section.group"), what="the groups")[0]
    members = group.find_elements("css selector", "article.member")
    assert len(members) == 8
    assert "reward 1.000" in members[0].text and "cut off" in members[1].text
    assert "tool call add" in members[2].text
    css(browser, "#show-tokens")[0].click()  # the page again, each completion as tokens
    wait_until(browser, lambda s: "tokens=1" in s.current_url, what="the tokens view")
    member = css(browser, "section.group article.member")[0]
    tokens = member.find_elements("css selector", ".tokens .tok")
    assert len(tokens) == 12 and tokens[0].is_displayed()
    assert "rgba(230, 80, 60" in tokens[0].get_attribute("style")


def test_an_eval_sample(server, browser, tree):
    _, ids = tree
    browser.get(f"{server.base}/run/{ids['a']}/evals?step=4")
    samples = wait_until(browser, lambda s: css(s, "article.sample"), what="the eval samples")
    assert "eval answer 5 try 0" in samples[0].text and "reward 1.000" in samples[0].text
    assert "pass@4 1.000" in css(browser, "#eval-table")[0].text


def test_a_comparison_with_its_config_diff(server, browser, tree):
    _, ids = tree
    browser.get(f"{server.base}/compare?runs={ids['a']},{ids['b']}")
    diff = wait_until(browser, lambda s: css(s, "#config-diff"), what="the config diff")[0]
    assert "trainer.optim.lr" in diff.text and "1e-05" in diff.text and "3e-05" in diff.text
    wait_until(browser, lambda s: points(s, 0, 1) == 8, what="both runs' reward curves")
    names = browser.execute_script(
        "return document.getElementById('panel-0').data.map(t => t.name)"
    )
    assert names == ["a: training", "b: training"]


@pytest.mark.parametrize(
    "path",
    ["/at/%2e%2e/%2e%2e/secret.txt", "/at/escape/secret.txt", "/at/a%2f..%2f..%2fsecret.txt"],
)
def test_path_escapes_are_refused(server, browser, path):
    """Chromium itself resolves an encoded `..` (`%2e%2e`) before sending: the server then
    sees a path that names nothing (404); the other forms reach it and are refused (400)."""
    browser.get(server.base + path)
    status = wait_until(browser, lambda s: css(s, "h1"), what="the refusal page")[0].text
    assert status in ("400", "404") and SECRET not in browser.page_source
    if status == "400":
        assert "refused" in browser.page_source
