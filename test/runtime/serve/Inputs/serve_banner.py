"""Starts kiln-serve with the given arguments, prints the line that says
what it serves, then stops it with SIGTERM.

  serve_banner.py ARTIFACT [kiln-serve flags...]"""
import signal
import subprocess
import sys

proc = subprocess.Popen(["kiln-serve", *sys.argv[1:], "--port", "0"], stderr=subprocess.PIPE,
                        text=True)
for line in proc.stderr:
    if "conversation slots" in line:
        print(line.strip())
    if "listening on" in line:
        break
proc.send_signal(signal.SIGTERM)
try:
    proc.communicate(timeout=60)
except subprocess.TimeoutExpired:
    proc.kill()  # never left running: it holds the pipe the test reads
    sys.exit("kiln-serve did not stop within 60 s of SIGTERM")
sys.exit(proc.returncode)
