"""Starts kiln-serve with the given arguments, prints the line that says
what it serves, then stops it with SIGTERM.

  serve_banner.py ARTIFACT [kiln-serve flags...]"""
import sys

from serve_process import ServeProcess

server = ServeProcess(sys.argv[1:])
for line in server.banner.splitlines():
    if "conversation slots" in line:
        print(line.strip())
server.stop(timeout=60)
