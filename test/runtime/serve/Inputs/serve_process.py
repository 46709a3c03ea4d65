"""One kiln-serve process as the serve tests run it: started on a free port,
its stderr kept whole (for failure messages and for what it says at exit),
stopped by SIGTERM and killed if it does not stop, so that no test waits on a
server's pipe; and killed when the test exits for any reason (a failed check,
an exception) with the server still running, so that none outlives its test.

    server = ServeProcess([ARTIFACT, "--weights", "synthetic:1", ...])
    server.port, server.banner   # after "listening on http://HOST:PORT"
    server.metrics()             # /metrics as {sample: value}
    server.stop()                # SIGTERM; fails unless it exits 0, "stopped"

Failures exit the test with "FAIL: " and the message; `ServeProcess.on_fail`
may add to the message (a test's own context)."""
import atexit
import http.client
import os
import queue
import signal
import subprocess
import sys
import threading
import time


def fail(message):
    sys.exit("FAIL: " + message)


class ServeProcess:
    def __init__(self, args, env=None, start_timeout=120):
        self.proc = subprocess.Popen(["kiln-serve", *args, "--port", "0"],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                                     env=dict(os.environ, **(env or {})))
        atexit.register(self.reap)
        self.lines = []
        arrived = queue.Queue()

        def read():
            for line in self.proc.stderr:
                self.lines.append(line)
                arrived.put(line)
            arrived.put(None)

        self.reader = threading.Thread(target=read, daemon=True)
        self.reader.start()
        self.port = None
        deadline = time.time() + start_timeout
        while self.port is None:
            try:
                line = arrived.get(timeout=max(0.0, deadline - time.time()))
            except queue.Empty:
                self.kill()
                fail(f"kiln-serve did not start within {start_timeout} s: " + self.said())
            if line is None:
                self.proc.wait()
                fail(f"kiln-serve exited ({self.proc.returncode}) before listening: " +
                     self.said())
            if "listening on http://" in line:
                self.port = int(line.strip().rsplit(":", 1)[1])
        # What it said up to and including the listening line.
        self.banner = self.said()

    def metrics(self):
        """/metrics as {sample name with its labels: value}."""
        conn = http.client.HTTPConnection("127.0.0.1", self.port, timeout=300)
        conn.request("GET", "/metrics")
        text = conn.getresponse().read().decode()
        conn.close()
        return {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
                for line in text.splitlines() if line and not line.startswith("#")}

    def said(self):
        """All it has written to stderr so far."""
        return "".join(self.lines)

    def signal(self, number=signal.SIGTERM):
        self.proc.send_signal(number)

    def wait(self, timeout=120):
        """Its exit status and all it said; killed if it has not exited within
        `timeout` seconds."""
        try:
            self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.kill()
            fail(f"kiln-serve did not exit within {timeout} s: " + self.said()[-4000:])
        self.reader.join()
        return self.proc.returncode, self.said()

    def kill(self):
        self.proc.kill()
        self.proc.wait()

    def reap(self):
        """At the test's exit: a server still running is killed."""
        if self.proc.poll() is None:
            self.kill()

    def stop(self, timeout=120):
        """SIGTERM, then the exit: 0 and "kiln-serve: stopped", or the test fails."""
        self.signal()
        status, said = self.wait(timeout)
        if status != 0 or "kiln-serve: stopped" not in said:
            fail(f"kiln-serve did not stop cleanly ({status}): " + said[-4000:])
        return said
