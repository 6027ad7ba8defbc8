#!/usr/bin/env python3
"""Side-by-side benchmark: `tenure run` on every store against the tools people
use instead, on one machine, with the same tiny job and 3 candidates each.

    python3 bench/peers.py [--trials 10] [--crash-trials 5] [--idle 30] [--only tenure-zk,kazoo,...]

Peers: `etcdctl lock NAME -- JOB` and `etcdctl elect` (Debian's etcd-client)
on a private etcd; ZooKeeper's election recipe through the Python `kazoo`
client on a private ZooKeeper; `python-redis-lock` (a Redis lock with
auto-renewal and BLPOP wake-ups) on a private Redis (both from PyPI, in a venv
under target/peers-venv). Looked for and not installable here: Consul (no
Debian candidate since its licence change), Kubernetes' client-go
leaderelection (needs an API server; none in Debian). tenure runs on SQLite
and on private PostgreSQL, MariaDB, Redis, etcd and ZooKeeper servers (as
root; without runuser/initdb or mariadb-install-db it falls back to the
shared TENURE_TEST_POSTGRES / TENURE_TEST_MYSQL, whose idle counters are then
not measured). Whatever is missing is named and its rows skipped.

Figures per system:
  graceful: SIGTERM to the leader -> the next job started (p50/p90/p99)
  crash:    SIGKILL to the leader, 2 s lease or session -> next job started
            (p50/max, and the lag past the 2 s)
  idle:     requests/s per candidate at a 10 s lease, by the server's own
            counters (etcd grpc_server_msg_received_total, ZooKeeper
            zk_packets_received, Redis total_commands_processed, MariaDB
            Questions, PostgreSQL transactions of pg_stat_database); n/a on
            SQLite (no server)
  rss:      resident memory of one idle candidate (its whole process group)
Never part of the test command.
"""

import argparse
import glob
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET = os.path.join(ROOT, "target")


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, within=60):
    end = time.time() + within
    while time.time() < end:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return True
        except OSError:
            time.sleep(0.1)
    return False


def four_letters(port, cmd):
    with socket.create_connection(("127.0.0.1", port), 2) as s:
        s.sendall(cmd.encode())
        out = b""
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    return out.decode()


class Servers:
    """Private etcd, ZooKeeper and Redis, killed at exit."""

    def __init__(self, tmp, missing):
        self.procs = []
        self.tmp = tmp
        self.etcd = self.zk = self.redis = self.pg = self.mariadb = None
        self.start_postgres(missing)
        self.start_mariadb(missing)
        if shutil.which("etcd"):
            cp, pp = free_port(), free_port()
            d = os.path.join(tmp, "etcd")
            self.procs.append(subprocess.Popen(
                ["etcd", "--name=b", f"--data-dir={d}",
                 f"--listen-client-urls=http://127.0.0.1:{cp}",
                 f"--advertise-client-urls=http://127.0.0.1:{cp}",
                 f"--listen-peer-urls=http://127.0.0.1:{pp}",
                 f"--initial-advertise-peer-urls=http://127.0.0.1:{pp}",
                 f"--initial-cluster=b=http://127.0.0.1:{pp}",
                 "--unsafe-no-fsync"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            if wait_port(cp):
                self.etcd = cp
        else:
            missing.append("etcd (apt-get install etcd-server)")
        jar = "/usr/share/java/zookeeper.jar"
        if os.path.exists(jar) and shutil.which("java"):
            zp = free_port()
            d = os.path.join(tmp, "zk")
            os.makedirs(d)
            cfg = os.path.join(tmp, "zoo.cfg")
            # tick 100 ms: sessions from 200 ms to 60 s, so a 2 s session is
            # possible for every client (the default tick, 2 s, allows >= 4 s).
            with open(cfg, "w") as f:
                f.write(f"tickTime=100\ndataDir={d}\nclientPort={zp}\nclientPortAddress=127.0.0.1\n"
                        "minSessionTimeout=200\nmaxSessionTimeout=60000\nadmin.enableServer=false\n"
                        "4lw.commands.whitelist=*\nforceSync=no\n")
            cp_ = jar + (":/usr/share/java/slf4j-nop.jar" if os.path.exists("/usr/share/java/slf4j-nop.jar") else "")
            self.procs.append(subprocess.Popen(
                ["java", "-Xmx256m", "-XX:+UseSerialGC", "-cp", cp_,
                 "org.apache.zookeeper.server.ZooKeeperServerMain", cfg],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            if wait_port(zp):
                for _ in range(100):
                    try:
                        if "Mode" in four_letters(zp, "srvr"):
                            break
                    except OSError:
                        pass
                    time.sleep(0.1)
                self.zk = zp
        else:
            missing.append("ZooKeeper (apt-get install zookeeper: /usr/share/java/zookeeper.jar and java)")
        if shutil.which("redis-server"):
            rp = free_port()
            self.procs.append(subprocess.Popen(
                ["redis-server", "--bind", "127.0.0.1", "--port", str(rp), "--save", "", "--appendonly", "no"],
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
            if wait_port(rp):
                self.redis = rp
        else:
            missing.append("redis-server (apt-get install redis-server)")

    def start_postgres(self, missing):
        """A private PostgreSQL (initdb as `postgres`, like the tests do):
        its pg_stat_database counts only the candidates' transactions."""
        bins = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
        if not bins or not shutil.which("runuser"):
            missing.append("a private PostgreSQL (apt-get install postgresql; needs root for runuser)")
            return
        bindir = os.path.dirname(bins[-1])
        d = os.path.join(self.tmp, "pg")
        os.makedirs(d)
        try:
            subprocess.run(["chown", "-R", "postgres:postgres", d], check=True)
            subprocess.run(["runuser", "-u", "postgres", "--", f"{bindir}/initdb", "-A", "trust", "-U",
                            "postgres", "-D", f"{d}/data"], check=True, stdout=subprocess.DEVNULL)
        except (subprocess.CalledProcessError, OSError) as e:
            missing.append(f"a private PostgreSQL (initdb failed: {e})")
            return
        port = free_port()
        self.procs.append(subprocess.Popen(
            ["runuser", "-u", "postgres", "--", f"{bindir}/postgres", "-D", f"{d}/data", "-p", str(port),
             "-k", d, "-c", "listen_addresses=127.0.0.1", "-c", "fsync=off"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        if wait_port(port):
            self.psql = ["runuser", "-u", "postgres", "--", f"{bindir}/psql", "-h", d, "-p", str(port),
                         "-U", "postgres", "-At"]
            for _ in range(50):
                if subprocess.run(self.psql + ["-c", "CREATE DATABASE test"], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode == 0:
                    self.pg = port
                    break
                time.sleep(0.2)
        if not self.pg:
            missing.append("a private PostgreSQL (did not start)")

    def start_mariadb(self, missing):
        """A private MariaDB: its global `Questions` counts only the candidates."""
        daemon = shutil.which("mariadbd") or shutil.which("mysqld") or "/usr/sbin/mariadbd"
        if not shutil.which("mariadb-install-db") or not os.path.exists(daemon):
            missing.append("a private MariaDB (apt-get install mariadb-server)")
            return
        d = os.path.join(self.tmp, "mariadb")
        os.makedirs(d)
        try:
            subprocess.run(["mariadb-install-db", "--no-defaults", "--user=root",
                            "--auth-root-authentication-method=normal", "--skip-test-db",
                            f"--datadir={d}/data"], check=True, stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL)
        except (subprocess.CalledProcessError, OSError) as e:
            missing.append(f"a private MariaDB (mariadb-install-db failed: {e})")
            return
        port = free_port()
        sock = f"{d}/sock"
        self.procs.append(subprocess.Popen(
            [daemon, "--no-defaults", "--user=root", "--bind-address=127.0.0.1", "--skip-name-resolve",
             f"--datadir={d}/data", f"--port={port}", f"--socket={sock}", f"--pid-file={d}/pid",
             "--innodb-flush-log-at-trx-commit=0"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True))
        if wait_port(port):
            self.mysql = ["mariadb", "--no-defaults", "-uroot", "--protocol=socket", f"--socket={sock}", "-N", "-B"]
            if subprocess.run(self.mysql + ["-e", "CREATE DATABASE IF NOT EXISTS test"]).returncode == 0:
                self.mariadb = port
        if not self.mariadb:
            missing.append("a private MariaDB (did not start)")

    def stop(self):
        # Each server is the leader of its own process group: killing the
        # group also stops what `runuser` started (the postmaster).
        for p in self.procs:
            try:
                os.killpg(p.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            p.wait()

    def counter(self, kind):
        """The server's own request counter."""
        if kind == "etcd":
            body = urllib.request.urlopen(f"http://127.0.0.1:{self.etcd}/metrics", timeout=5).read().decode()
            return sum(float(l.rsplit(" ", 1)[1]) for l in body.splitlines()
                       if l.startswith("grpc_server_msg_received_total"))
        if kind == "zk":
            for l in four_letters(self.zk, "mntr").splitlines():
                if l.startswith("zk_packets_received"):
                    return float(l.split()[1])
        if kind == "postgres":
            # Every transaction of the server's databases; this read is one
            # more (subtracted). Backends report at most once a second.
            out = subprocess.run(self.psql + ["-d", "postgres", "-c",
                                 "SELECT sum(xact_commit + xact_rollback) FROM pg_stat_database"],
                                 capture_output=True, text=True, check=True).stdout
            return float(out.strip()) - 1
        if kind == "mariadb":
            out = subprocess.run(self.mysql + ["-e", "SHOW GLOBAL STATUS LIKE 'Questions'"],
                                 capture_output=True, text=True, check=True).stdout
            return float(out.split()[1]) - 1  # this SHOW
        if kind == "redis":
            with socket.create_connection(("127.0.0.1", self.redis), 2) as s:
                s.sendall(b"INFO stats\r\n")
                time.sleep(0.2)
                out = s.recv(65536).decode()
            for l in out.splitlines():
                if l.startswith("total_commands_processed:"):
                    return float(l.split(":")[1]) - 1  # this INFO
        return None


KAZOO_CANDIDATE = r'''
import os, signal, subprocess, sys
from kazoo.client import KazooClient
from kazoo.recipe.election import Election
hosts, path, ident, timeout, job = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4]), sys.argv[5]
zk = KazooClient(hosts=hosts, timeout=timeout)
zk.start()
child = []
def stop(*_):
    # What a careful user writes: close the session (deletes our znode at
    # once) and stop the job, so the next candidate does not wait a timeout.
    for c in child:
        c.terminate()
    zk.stop()
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
def lead():
    c = subprocess.Popen(["sh", "-c", job])
    child.append(c)
    c.wait()
Election(zk, path, ident).run(lead)
'''


REDIS_LOCK_CANDIDATE = r'''
import os, signal, subprocess, sys
import redis, redis_lock
url, name, ident, ttl, job = sys.argv[1], sys.argv[2], sys.argv[3], int(float(sys.argv[4])), sys.argv[5]
# redis-py 8 times reads out after a few seconds by default: BLPOP waits up
# to the lease time, so no read timeout.
lock = redis_lock.Lock(redis.Redis.from_url(url, socket_timeout=None), name, expire=ttl, auto_renewal=True, id=ident)
child = []
def stop(*_):
    # Stop the job (not waiting for it: this handler may interrupt
    # Popen.wait, whose lock it would then wait for forever), then release:
    # the release pushes to the lock's signal list, which wakes a waiter
    # blocked in BLPOP at once.
    for c in child:
        c.terminate()
    try:
        lock.release()
    except Exception:
        pass
    os._exit(0)
signal.signal(signal.SIGTERM, stop)
lock.acquire(blocking=True)
c = subprocess.Popen(["sh", "-c", job])
child.append(c)
c.wait()
'''


class System:
    def __init__(self, name, argv, holder=None, counter=None, crash=True, note=""):
        self.name, self.argv, self.holder, self.counter, self.crash, self.note = name, argv, holder, counter, crash, note


def systems(servers, tenure, venv_py, missing):
    out = []
    etcdctl = shutil.which("etcdctl")
    mysql = os.environ.get("TENURE_TEST_MYSQL", "mysql://root@127.0.0.1:3306/test")
    pg = os.environ.get("TENURE_TEST_POSTGRES", "postgres://postgres@127.0.0.1:5432/test")

    def tenure_sys(name, url, counter=None):
        return System(name, lambda i, ttl, el, job: [
            tenure, "run", "--store", url, "--election", el, "--ttl", f"{ttl}s",
            "--id", f"c{i}", "--", "sh", "-c", job], counter=counter)

    if tenure:
        out.append(tenure_sys("tenure-sqlite", "sqlite://" + os.path.join(servers.tmp, "peers.db")))
        if servers.mariadb:
            out.append(tenure_sys("tenure-mariadb", f"mysql://root@127.0.0.1:{servers.mariadb}/test", "mariadb"))
        else:
            out.append(tenure_sys("tenure-mariadb", mysql))
        if servers.pg:
            out.append(tenure_sys("tenure-postgres", f"postgres://postgres@127.0.0.1:{servers.pg}/test", "postgres"))
        else:
            out.append(tenure_sys("tenure-postgres", pg))
        if servers.redis:
            out.append(tenure_sys("tenure-redis", f"redis://127.0.0.1:{servers.redis}/0", "redis"))
        if servers.etcd:
            out.append(tenure_sys("tenure-etcd", f"etcd://127.0.0.1:{servers.etcd}", "etcd"))
        if servers.zk:
            out.append(tenure_sys("tenure-zk", f"zk://127.0.0.1:{servers.zk}", "zk"))
    if servers.etcd and etcdctl:
        ep = f"--endpoints=127.0.0.1:{servers.etcd}"
        out.append(System("etcdctl-lock", lambda i, ttl, el, job: [
            etcdctl, ep, "lock", f"--ttl={ttl}", el, "--", "sh", "-c", job], counter="etcd"))
        # `elect` has no TTL flag: its session is etcdctl's default, 60 s.
        out.append(System("etcdctl-elect", lambda i, ttl, el, job: [
            "sh", "-c", f"{etcdctl} {ep} elect {el} c{i} | {{ read _; read _; {job}; }}"],
            holder="etcdctl", counter="etcd", crash=False,
            note="no session TTL flag (60 s): crash not measured"))
    elif servers.etcd:
        missing.append("etcdctl (apt-get install etcd-client)")
    if servers.zk and venv_py:
        kazoo = os.path.join(servers.tmp, "kazoo_candidate.py")
        with open(kazoo, "w") as f:
            f.write(KAZOO_CANDIDATE)
        out.append(System("kazoo-election", lambda i, ttl, el, job: [
            venv_py, kazoo, f"127.0.0.1:{servers.zk}", f"/peers/{el}", f"c{i}", str(ttl), job],
            counter="zk"))
    if servers.redis and venv_py:
        redis_lock = os.path.join(servers.tmp, "redis_lock_candidate.py")
        with open(redis_lock, "w") as f:
            f.write(REDIS_LOCK_CANDIDATE)
        out.append(System("python-redis-lock", lambda i, ttl, el, job: [
            venv_py, redis_lock, f"redis://127.0.0.1:{servers.redis}/0", el, f"c{i}", str(ttl), job],
            counter="redis"))
    return out


def peer_python(missing):
    """A venv under target/ with the Python peers (kazoo, python-redis-lock)
    from PyPI; returns its python and the versions installed."""
    venv = os.path.join(TARGET, "peers-venv")
    py = os.path.join(venv, "bin", "python")
    pkgs = ["kazoo", "python-redis-lock", "redis"]
    try:
        if not os.path.exists(py):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True, stdout=subprocess.DEVNULL)
        if subprocess.run([py, "-c", "import kazoo, redis_lock, redis"], stderr=subprocess.DEVNULL).returncode != 0:
            subprocess.run([py, "-m", "pip", "install", "-q"] + pkgs, check=True)
        v = subprocess.run([py, "-m", "pip", "show"] + pkgs, capture_output=True, text=True).stdout
        names = [l.split()[1] for l in v.splitlines() if l.startswith("Name")]
        vers = [l.split()[1] for l in v.splitlines() if l.startswith("Version")]
        return py, ", ".join(f"{n} {ver}" for n, ver in zip(names, vers))
    except (subprocess.CalledProcessError, OSError) as e:
        missing.append(f"kazoo and python-redis-lock (python -m venv {venv}; pip install {' '.join(pkgs)} failed: {e})")
        return None, None


class Group:
    """3 candidates of one system, each in its own process group."""

    def __init__(self, sysm, ttl, tmp):
        self.sys, self.ttl = sysm, ttl
        self.election = f"peers-{sysm.name}-{ttl}-{int(time.time()*1000)%100000}"
        self.log = os.path.join(tmp, f"{self.election}.log")
        open(self.log, "w").close()
        self.procs = [None] * 3
        for i in range(3):
            self.start(i)

    def job(self, i):
        # Exits at once on SIGTERM (a job that ignores it, like a bare
        # `sleep` run as the init of tenure's PID namespace, would be killed
        # only after the supervisor's grace, and measure that grace).
        return (f'echo "$(date +%s%N) c{i}" >> {self.log}; '
                "trap 'kill $s 2>/dev/null; exit 0' TERM; sleep 100000 & s=$!; wait $s")

    def start(self, i):
        self.procs[i] = subprocess.Popen(
            self.sys.argv(i, self.ttl, self.election, self.job(i)),
            start_new_session=True, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=open(f"{self.log}.c{i}.err", "ab"),
            env=dict(os.environ, ETCDCTL_API="3", TENURE_LOG="warn"))

    def kill_group(self, i):
        try:
            os.killpg(self.procs[i].pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.procs[i].wait()

    def stop(self):
        for i in range(3):
            self.kill_group(i)

    def lines(self):
        with open(self.log) as f:
            return [l.split() for l in f if l.strip()]

    def pids_in_group(self, i):
        pgid = self.procs[i].pid
        pids = []
        for d in os.listdir("/proc"):
            if d.isdigit():
                try:
                    with open(f"/proc/{d}/stat") as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    if int(fields[2]) == pgid:
                        pids.append(int(d))
                except (OSError, IndexError, ValueError):
                    pass
        return pids

    def holder_pid(self, i):
        if not self.sys.holder:
            return self.procs[i].pid
        for p in self.pids_in_group(i):
            try:
                with open(f"/proc/{p}/comm") as f:
                    if f.read().strip() == self.sys.holder:
                        return p
            except OSError:
                pass
        return self.procs[i].pid

    def rss_kib(self, i):
        total = 0
        for p in self.pids_in_group(i):
            try:
                with open(f"/proc/{p}/status") as f:
                    for l in f:
                        if l.startswith("VmRSS:"):
                            total += int(l.split()[1])
            except OSError:
                pass
        return total

    def stable_leader(self, within=40):
        """Waits for a leader whose job started and no other start for 1 s."""
        end = time.time() + within
        while time.time() < end:
            ls = self.lines()
            if ls and time.time_ns() - int(ls[-1][0]) > 1e9:
                return int(ls[-1][1][1:]), len(ls)
            time.sleep(0.05)
        return None, None

    def trial(self, sig, within=20):
        leader, n = self.stable_leader()
        if leader is None:
            return None
        # Let the followers settle (member registrations, watches).
        time.sleep(max(1.0, self.ttl * 0.6))
        leader, n = self.stable_leader()
        t0 = time.time_ns()
        os.kill(self.holder_pid(leader), sig)
        end = time.time() + within
        got = None
        while time.time() < end and got is None:
            for ts, who in self.lines()[n:]:
                if who != f"c{leader}":
                    got = (int(ts) - t0) / 1e6
                    break
            time.sleep(0.005)
        self.kill_group(leader)
        self.start(leader)
        return got


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(round(p / 100 * (len(xs) - 1))))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--crash-trials", type=int, default=5)
    ap.add_argument("--idle", type=float, default=30)
    ap.add_argument("--only", default="")
    ap.add_argument("--with-rows", default="", help="JSON lines of rows from an earlier run to report together")
    a = ap.parse_args()
    missing = []
    tenure = next((p for p in [os.path.join(TARGET, "release", "tenure"), os.path.join(TARGET, "debug", "tenure")]
                   if os.path.exists(p)), None)
    if not tenure:
        missing.append("the tenure binary (cargo build --release -p tenure-cli)")
    tmp = tempfile.mkdtemp(prefix="tenure-peers")
    os.chmod(tmp, 0o755)  # the private PostgreSQL runs as `postgres`
    servers = Servers(tmp, missing)
    venv_py, py_versions = peer_python(missing) if servers.zk or servers.redis else (None, None)
    rows = []
    g = None
    try:
        syss = systems(servers, tenure, venv_py, missing)
        if a.only:
            syss = [s for s in syss if s.name in a.only.split(",")]
        for s in syss:
            print(f"== {s.name}", flush=True)
            r = {"name": s.name, "note": s.note}
            g = Group(s, 2, tmp)
            got = [g.trial(signal.SIGTERM) for _ in range(a.trials)]
            r["graceful"] = [x for x in got if x is not None]
            misses = [f"{got.count(None)} of {len(got)} SIGTERMs moved nothing within 20 s"] if None in got else []
            if s.crash:
                got = [g.trial(signal.SIGKILL) for _ in range(a.crash_trials)]
                r["crash"] = [x for x in got if x is not None]
                if None in got:
                    misses.append(f"{got.count(None)} of {len(got)} SIGKILLs moved nothing within 20 s")
            r["note"] = "; ".join([n for n in [s.note] + misses if n])
            g.stop()
            g = Group(s, 10, tmp)
            leader, _ = g.stable_leader()
            time.sleep(12)
            if s.counter:
                c0 = servers.counter(s.counter)
                time.sleep(a.idle)
                c1 = servers.counter(s.counter)
                r["idle"] = (c1 - c0) / a.idle / 3
            follower = next(i for i in range(3) if i != leader)
            r["rss_mib"] = g.rss_kib(follower) / 1024
            g.stop()
            print(json.dumps(r), flush=True)
            rows.append(r)
    finally:
        if g:
            g.stop()
        servers.stop()
    if a.with_rows:
        with open(a.with_rows) as fh:
            earlier = [json.loads(l) for l in fh if l.startswith("{")]
        names = {r["name"] for r in rows}
        rows = [r for r in earlier if r["name"] not in names] + rows
    report(rows, missing, tenure, py_versions, a)


def report(rows, missing, tenure, py_versions, a):
    def f(x, d=1):
        return "n/a" if x is None else f"{x:.{d}f}"
    cols = {
        "graceful p50": lambda r: pct(r["graceful"], 50) if r.get("graceful") else None,
        "graceful p90": lambda r: pct(r["graceful"], 90) if r.get("graceful") else None,
        "graceful p99": lambda r: pct(r["graceful"], 99) if r.get("graceful") else None,
        "crash p50": lambda r: pct(r["crash"], 50) if r.get("crash") else None,
        "crash max": lambda r: max(r["crash"]) if r.get("crash") else None,
        "lag past 2 s (p50)": lambda r: pct(r["crash"], 50) - 2000 if r.get("crash") else None,
        "idle req/s": lambda r: r.get("idle"),
        "RSS MiB": lambda r: r.get("rss_mib"),
    }
    peers = [r for r in rows if not r["name"].startswith("tenure")]
    best = {}
    for c, fn in cols.items():
        vals = [fn(r) for r in peers if fn(r) is not None]
        best[c] = min(vals) if vals else None
    lines = [
        f"`python3 bench/peers.py --trials {a.trials} --crash-trials {a.crash_trials} --idle {a.idle:g}`, "
        f"{time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}, tenure binary {os.path.relpath(tenure, ROOT) if tenure else '-'}, "
        f"etcd {subprocess.run(['etcd', '--version'], capture_output=True, text=True).stdout.split()[2] if shutil.which('etcd') else '-'}, "
        f"ZooKeeper 3.8 (Debian), {py_versions or 'no Python peers'}; times in ms; (xN) = ratio to the best peer in the column.",
        "",
        "| system | " + " | ".join(cols) + " | note |",
        "|---|" + "---|" * (len(cols) + 1),
    ]
    for r in rows:
        cells = []
        for c, fn in cols.items():
            v = fn(r)
            d = 2 if c == "idle req/s" else 1
            ratio = "" if v is None or not best[c] else f" (x{v / best[c]:.2f})"
            cells.append(f(v, d) + ratio)
        lines.append(f"| {r['name']} | " + " | ".join(cells) + f" | {r.get('note','')} |")
    if missing:
        lines += ["", "Missing (rows skipped): " + "; ".join(missing)]
    text = "\n".join(lines)
    print()
    print(text)
    os.makedirs(os.path.join(TARGET, "peers"), exist_ok=True)
    with open(os.path.join(TARGET, "peers", "results.md"), "w") as fh:
        fh.write(text + "\n")
    with open(os.path.join(TARGET, "peers", "results.json"), "w") as fh:
        json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()
