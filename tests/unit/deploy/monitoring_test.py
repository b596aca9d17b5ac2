"""deploy/monitoring: the alert rules pass their promtool unit tests, every
dashboard query parses as PromQL, and every lnetr_ series the two name is
one lnetr-control exports (a name in control/*.cpp)."""

import glob
import json
import os
import re
import shutil
import subprocess
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", "..", ".."))
MON = os.path.join(ROOT, "deploy", "monitoring")


def promtool(*args, cwd=MON):
    return subprocess.run(["promtool"] + list(args), cwd=cwd, capture_output=True, text=True, timeout=120)


def dashboard_exprs():
    with open(os.path.join(MON, "lnetr-dashboard.json")) as f:
        d = json.load(f)
    out = []
    for p in d["panels"]:
        for t in p.get("targets", []):
            out.append((p["title"], t["expr"]))
    return d, out


@unittest.skipUnless(shutil.which("promtool"), "promtool not installed (deploy/setup installs prometheus)")
class Monitoring(unittest.TestCase):

    def test_alert_rules_check_and_pass_their_unit_tests(self):
        cp = promtool("check", "rules", "lnetr-alerts.yml")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        cp = promtool("test", "rules", "lnetr-alerts.test.yml")
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        self.assertIn("SUCCESS", cp.stdout)
        # Every alert has a test that expects it to fire.
        with open(os.path.join(MON, "lnetr-alerts.yml")) as f:
            alerts = set(re.findall(r"^\s*- alert: (\w+)", f.read(), re.M))
        with open(os.path.join(MON, "lnetr-alerts.test.yml")) as f:
            tests = f.read()
        fired = set(re.findall(r"alertname: (\w+)\n\s*exp_alerts:\n\s*- exp_labels", tests))
        self.assertEqual(alerts - fired, set())

    def test_a_broken_rule_fails_its_test(self):
        # The tests can fail: a rule that never fires is caught.
        d = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, d)
        with open(os.path.join(MON, "lnetr-alerts.yml")) as f:
            rules = f.read().replace("expr: lnetr_route_up == 0", "expr: lnetr_route_up == 2")
        with open(os.path.join(d, "lnetr-alerts.yml"), "w") as f:
            f.write(rules)
        shutil.copy(os.path.join(MON, "lnetr-alerts.test.yml"), d)
        cp = promtool("test", "rules", "lnetr-alerts.test.yml", cwd=d)
        self.assertNotEqual(cp.returncode, 0)
        self.assertIn("LnetrRouteDown", cp.stdout + cp.stderr)

    def test_dashboard_queries_parse(self):
        d, exprs = dashboard_exprs()
        self.assertGreaterEqual(len(exprs), 20)
        # Grafana's variables replaced by what they stand for, then each
        # query checked as a recording rule's expression.
        lines = ["groups:", "  - name: dashboard", "    rules:"]
        for i, (_, e) in enumerate(exprs):
            e = e.replace("$__rate_interval", "1m").replace("$instance", ".*")
            lines += ["      - record: dashboard:q%d" % i, "        expr: %s" % json.dumps(e)]
        tmp = tempfile.NamedTemporaryFile("w", suffix=".yml", delete=False)
        self.addCleanup(os.unlink, tmp.name)
        tmp.write("\n".join(lines) + "\n")
        tmp.close()
        cp = promtool("check", "rules", tmp.name)
        self.assertEqual(cp.returncode, 0, cp.stdout + cp.stderr)
        ids = [p["id"] for p in d["panels"]]
        self.assertEqual(len(ids), len(set(ids)))

    def test_every_series_named_is_exported(self):
        exported = set()
        for path in glob.glob(os.path.join(ROOT, "control", "*.cpp")):
            with open(path) as f:
                exported |= set(re.findall(r'"(lnetr_[a-z0-9_]+)"', f.read()))
        named = set()
        for name in ("lnetr-alerts.yml", "lnetr-dashboard.json", "lnetr-alerts.test.yml"):
            with open(os.path.join(MON, name)) as f:
                named |= set(re.findall(r"\b(lnetr_[a-z0-9_]+)\b", f.read()))
        self.assertTrue(named)
        self.assertEqual(named - exported, set())


if __name__ == "__main__":
    unittest.main()
