"""A throwaway PostgreSQL server for tests and benchmarks.

Uses the server binaries of Debian's ``postgresql`` package (``initdb``, ``pg_ctl`` under
``/usr/lib/postgresql/<version>/bin``): creates a cluster in a fresh temporary folder, starts
it on a free port of 127.0.0.1 (its unix socket in that folder, no other listener), with a
random password for a superuser ``robustscope``, and removes everything when stopped.
PostgreSQL refuses to run as root, so under root (as in CI) the server runs as the
``postgres`` user that the package creates.
"""

from __future__ import annotations

import glob
import os
import secrets
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path

USER = "robustscope"
DATABASE = "robustscope"


def find_bindir() -> Path | None:
    """Folder holding ``initdb`` and ``pg_ctl``: ``$PG_BINDIR``, the newest
    ``/usr/lib/postgresql/*/bin``, or the one of ``initdb`` on ``PATH``; None if absent."""
    candidates = [os.environ.get("PG_BINDIR", "")]
    versions = glob.glob("/usr/lib/postgresql/*/bin")
    versions.sort(key=lambda p: int(p.split("/")[-2]) if p.split("/")[-2].isdigit() else 0,
                  reverse=True)
    candidates += versions
    on_path = shutil.which("initdb")
    if on_path:
        candidates.append(str(Path(on_path).resolve().parent))
    for c in candidates:
        if c and (Path(c) / "initdb").is_file() and (Path(c) / "pg_ctl").is_file():
            return Path(c)
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class ThrowawayCluster:
    """Context manager: ``with ThrowawayCluster() as pg: pg.url`` is
    ``postgresql://robustscope:<password>@127.0.0.1:<port>/robustscope``.

    ``durable=False`` (the default, for tests) turns off fsync and synchronous commit: fast,
    and safe for data nobody keeps. Benchmarks pass ``durable=True`` to time a server as it
    would be configured for real.
    """

    def __init__(self, bindir: Path | None = None, durable: bool = False) -> None:
        found = bindir or find_bindir()
        if found is None:
            raise FileNotFoundError("PostgreSQL server binaries (initdb, pg_ctl) not found")
        self.bindir = found
        self.durable = durable
        self.root: Path | None = None
        self.port = 0
        self.password = secrets.token_hex(12)
        self._as: list[str] = []

    @property
    def url(self) -> str:
        return f"postgresql://{USER}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    def _run(self, *args: str) -> subprocess.CompletedProcess:
        done = subprocess.run([*self._as, *args], capture_output=True, text=True, timeout=120)
        if done.returncode != 0:
            log = ""
            if self.root is not None and (self.root / "server.log").is_file():
                log = (self.root / "server.log").read_text()[-2000:]
            raise RuntimeError(f"{' '.join(args[:2])} failed ({done.returncode}): "
                               f"{done.stderr.strip()} {done.stdout.strip()} {log}")
        return done

    def start(self) -> ThrowawayCluster:
        self.root = Path(tempfile.mkdtemp(prefix="robustscope-pg-"))
        uid = -1
        if os.geteuid() == 0:  # the server will not run as root
            import pwd

            try:
                pw = pwd.getpwnam("postgres")
            except KeyError as err:
                raise RuntimeError("running as root, but there is no 'postgres' user to run "
                                   "the server as (install Debian's postgresql package)") from err
            uid = pw.pw_uid
            os.chown(self.root, pw.pw_uid, pw.pw_gid)
            self._as = ["runuser", "-u", "postgres", "--"]
        pwfile = self.root / "pw"
        pwfile.write_text(self.password + "\n")
        if uid >= 0:
            os.chown(pwfile, uid, -1)
        data = self.root / "data"
        self._run(str(self.bindir / "initdb"), "-D", str(data), "-U", USER,
                  f"--pwfile={pwfile}", "--auth=scram-sha-256", "-E", "UTF8",
                  "--locale=C", "--no-sync")
        pwfile.unlink()
        self.port = _free_port()
        opts = [f"-p {self.port}", f"-k {self.root}", "-c listen_addresses=127.0.0.1",
                "-c max_connections=50"]
        if not self.durable:
            opts += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run(str(self.bindir / "pg_ctl"), "-D", str(data), "-l",
                  str(self.root / "server.log"), "-o", " ".join(opts), "-w", "-t", "60",
                  "start")
        self._create_database()
        return self

    def _create_database(self) -> None:
        import sqlalchemy as sa

        admin = sa.create_engine(
            f"postgresql+psycopg://{USER}:{self.password}@127.0.0.1:{self.port}/postgres",
            isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql(f"CREATE DATABASE {DATABASE}")
        finally:
            admin.dispose()

    def pause(self) -> None:
        """Stop the server as a crash would take it away (``immediate``), keeping its data:
        :meth:`resume` brings it back on the same port. A checkpoint first writes what was
        committed: a test cluster runs without fsync and synchronous commit, where a crash
        would also lose the last commits, which a real server keeps."""
        assert self.root is not None
        import sqlalchemy as sa

        admin = sa.create_engine(
            f"postgresql+psycopg://{USER}:{self.password}@127.0.0.1:{self.port}/postgres",
            isolation_level="AUTOCOMMIT")
        try:
            with admin.connect() as conn:
                conn.exec_driver_sql("CHECKPOINT")
        finally:
            admin.dispose()
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-m",
                  "immediate", "-w", "stop")

    def resume(self) -> None:
        """Start a server stopped by :meth:`pause` again, with its data, on the same port."""
        assert self.root is not None
        opts = [f"-p {self.port}", f"-k {self.root}", "-c listen_addresses=127.0.0.1",
                "-c max_connections=50"]
        if not self.durable:
            opts += ["-c fsync=off", "-c synchronous_commit=off", "-c full_page_writes=off"]
        self._run(str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"), "-l",
                  str(self.root / "server.log"), "-o", " ".join(opts), "-w", "-t", "60",
                  "start")

    def stop(self) -> None:
        if self.root is None:
            return
        try:
            if (self.root / "data" / "postmaster.pid").exists():
                self._run(str(self.bindir / "pg_ctl"), "-D", str(self.root / "data"),
                          "-m", "fast", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)
            self.root = None

    def __enter__(self) -> ThrowawayCluster:
        try:
            return self.start()
        except BaseException:
            self.stop()
            raise

    def __exit__(self, *exc: object) -> None:
        self.stop()
