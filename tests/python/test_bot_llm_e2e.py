"""The bot with an LLM configured: a labelled pull request's job runs the
LLM search (bot/search) against the LLM simulator (tests/sim/llm_sim.py),
and what the maintainer sees says so.

- the daemon's `kernelbot run` child gets the model's API key through its
  environment only: the child's config file on disk holds a ${...}
  reference, the simulator (which enforces the key) still answers;
- the bot's pull request names the LLM search and its model, with the
  search figures (candidates, generations, LLM cost line);
- the progress comment shows the MAP-Elites archive grid.

The world (GitHub simulator, real git server, operator kb_relu) is
test_bot_e2e's.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(__file__))
import test_bot_e2e as E  # noqa: E402

sys.path.insert(0, os.path.join(E.TOP, "tests", "sim"))
from llm_sim import LLMSim  # noqa: E402

LLM_KEY = "sk-llm-e2e-7f3a9c"


@pytest.fixture
def sim():
    s = LLMSim(seed=11, api_key=LLM_KEY).start()
    yield s
    s.stop()


@E.needs_gitserver
def test_job_runs_the_llm_search(tmp_path, sim):
    w = E.World(tmp_path)
    try:
        cfg = w.config()
        with open(cfg, "a") as f:
            f.write("[llm]\nmodels = sim\ntimeout_s = 5\nmax_retries = 1\n"
                    "[llm.sim]\nprovider = openai\nbase_url = %s\nmodel = sim-1\n"
                    "api_key = ${KB_E2E_LLM_KEY}\nmax_tokens = 2000\n"
                    "[search]\nislands = 1\ngenerations = 1\nper_generation = 2\ninitial = 3\n"
                    "repair_rounds = 0\nmeta_interval = 0\nllm_verifiers = off\n"
                    "tune_templates = off\n" % sim.base_url)
        env = w.env()
        env["KB_E2E_LLM_KEY"] = LLM_KEY
        log = open(str(tmp_path / "daemon0.log"), "w")
        p = E.subprocess.Popen([E.KB, "daemon", "-c", cfg, "--until-idle"], stdout=log,
                               stderr=E.subprocess.STDOUT, env=env, start_new_session=True)
        log.close()
        w.daemons.append(p)
        assert p.wait(300) == 0, w.log()

        pr = E.check_published(w)
        assert "LLM search (sim)" in pr["body"], pr["body"]
        comment = E.check_progress_and_labels(w)
        assert "Archive cells filled" in comment["body"], comment["body"]

        # the key reached the simulator (it answers 401 otherwise) ...
        stats = sim.stats()
        assert stats["by_status"].get("200", 0) > 0, stats
        assert not stats["by_status"].get("401"), stats
        # ... but no file the bot wrote holds it
        for root, _, files in os.walk(w.state):
            for name in files:
                path = os.path.join(root, name)
                with open(path, "rb") as f:
                    assert LLM_KEY.encode() not in f.read(), path
        jobs = w.db("SELECT id FROM jobs")
        # the search's row belongs to the job (the daemon passes --job-id)
        assert w.db("SELECT job_id FROM searches") == [(jobs[0][0],)]
        run_ini = os.path.join(w.state, "jobs", str(jobs[0][0]), "run.ini")
        with open(run_ini) as f:
            assert "${KERNELBOT_LLM_KEY_0}" in f.read()
        kernel_json = E.json.loads(E.git("--git-dir", w.bare, "show", "%s:kernelbot/%s/kernel.json"
                                         % (E.BRANCH, E.SLUG)))
        assert kernel_json["search"]["proposer"] == "llm search"
        assert kernel_json["search"]["models"] == ["sim"]
    finally:
        w.close()
