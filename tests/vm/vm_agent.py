"""The agent inside an lnetr test guest (runs as root in the guest's chroot).

Started by the initramfs' /init as `python3 -u /ctl/agent.py /ctl`, where
/ctl is a 9p share of the host's run directory mounted without caching.
Protocol (all files in that share; the host writes each request to tmp/ and
renames it into req/, the agent writes results to out/ the same way):

  config.json          written by the host before boot: extra 9p mounts,
                       whether to load virtio_net
  ready                written by the agent once it takes requests (JSON:
                       guest uptime, kernel, interfaces)
  req/ID.json          run {"cmd": shell command, "env": {...}, "cwd": dir}
                       with bash -c, its own session, stdin /dev/null,
                       stdout to out/ID.out and stderr to out/ID.err
  out/ID.rc            the exit status once it has ended (negative: the
                       signal that ended it, as Python's subprocess says)
  req/ID.N.kill        a signal number for ID's whole process group
  req/poweroff         kill everything and exit; /init then powers off

Standard library only; its errors go to the guest console (the host keeps
it in the run directory's console.log).
"""

import json
import os
import signal
import subprocess
import sys
import time

BASE_ENV = {
    "PATH": "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
    "HOME": "/root",
    "LANG": "C.UTF-8",
    "TERM": "dumb",
}


def log(msg):
    print(f"lnetr-agent: {msg}", file=sys.stderr, flush=True)


def write_atomic(path, text):
    tmp = path + ".tmp"
    with open(tmp, "w") as f:
        f.write(text)
    os.rename(tmp, path)


def setup(ctl, config):
    for m in config.get("mounts", []):
        os.makedirs(m["path"], exist_ok=True)
        r = subprocess.run(["mount", "-t", "9p", "-o", m["options"], m["tag"], m["path"]],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"mount {m['tag']} on {m['path']}: {r.stdout.strip()}")
    if config.get("nics", 0) > 0:
        r = subprocess.run(["modprobe", "-d", "/mods", "virtio_net"],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        if r.returncode != 0:
            raise RuntimeError(f"modprobe virtio_net: {r.stdout.strip()}")
        deadline = time.monotonic() + 20
        want = [f"eth{i}" for i in range(config["nics"])]
        while not all(os.path.exists(f"/sys/class/net/{n}") for n in want):
            if time.monotonic() > deadline:
                raise RuntimeError(f"NICs missing: have {sorted(os.listdir('/sys/class/net'))}, want {want}")
            time.sleep(0.02)


def main():
    ctl = sys.argv[1]
    req, out = os.path.join(ctl, "req"), os.path.join(ctl, "out")
    with open(os.path.join(ctl, "config.json")) as f:
        config = json.load(f)
    try:
        setup(ctl, config)
    except Exception as e:  # noqa: BLE001 - reported to the host, then exit
        log(f"setup failed: {e}")
        write_atomic(os.path.join(ctl, "failed"), str(e) + "\n")
        return 1
    with open("/proc/uptime") as f:
        uptime = float(f.read().split()[0])
    write_atomic(os.path.join(ctl, "ready"), json.dumps({
        "uptime": uptime,
        "kernel": os.uname().release,
        "interfaces": sorted(os.listdir("/sys/class/net")),
        "pid": os.getpid(),
    }) + "\n")
    log(f"ready at {uptime:.2f} s guest uptime")

    procs = {}  # id -> (Popen, stdout file, stderr file)
    idle_since = time.monotonic()
    while True:
        names = os.listdir(req)
        busy = bool(names)
        for name in sorted(n for n in names if n.endswith(".json")):
            ident = name[:-5]
            path = os.path.join(req, name)
            try:
                with open(path) as f:
                    r = json.load(f)
                os.unlink(path)
                env = dict(BASE_ENV)
                env.update(r.get("env") or {})
                fo = open(os.path.join(out, ident + ".out"), "wb")
                fe = open(os.path.join(out, ident + ".err"), "wb")
                try:
                    p = subprocess.Popen(["/bin/bash", "-c", r["cmd"]], stdin=subprocess.DEVNULL,
                                         stdout=fo, stderr=fe, env=env, cwd=r.get("cwd") or "/",
                                         start_new_session=True)
                except OSError as e:
                    fe.write(f"lnetr-agent: cannot start: {e}\n".encode())
                    fo.close()
                    fe.close()
                    write_atomic(os.path.join(out, ident + ".rc"), "127\n")
                    continue
                procs[ident] = (p, fo, fe)
            except Exception as e:  # noqa: BLE001 - keep serving other requests
                log(f"request {name}: {e}")
                write_atomic(os.path.join(out, ident + ".rc"), "127\n")
        for name in sorted(n for n in names if n.endswith(".kill")):
            path = os.path.join(req, name)
            ident = name.split(".")[0]
            try:
                with open(path) as f:
                    sig = int(f.read().strip() or signal.SIGTERM)
                os.unlink(path)
                if ident in procs:
                    os.killpg(procs[ident][0].pid, sig)
            except (OSError, ValueError) as e:
                log(f"kill {name}: {e}")
        if "poweroff" in names:
            for p, _, _ in procs.values():
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except OSError:
                    pass
            log("poweroff requested")
            os.sync()
            return 0
        for ident in list(procs):
            p, fo, fe = procs[ident]
            rc = p.poll()
            if rc is not None:
                fo.close()
                fe.close()
                write_atomic(os.path.join(out, ident + ".rc"), f"{rc}\n")
                del procs[ident]
                busy = True
        now = time.monotonic()
        if busy:
            idle_since = now
        # Poll fast while requests come in, slower when idle for a while
        # (each poll is a few 9p round trips).
        time.sleep(0.005 if now - idle_since < 2 else 0.02)


if __name__ == "__main__":
    sys.exit(main())
