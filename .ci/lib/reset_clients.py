"""Clients that reset mid-stream or half-close: the echo server must survive both."""
import os
import socket
import struct
import sys

port = int(sys.argv[1])
for i in range(200):
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(os.urandom(100_000))
    if i % 2 == 0:
        # SO_LINGER 0: close sends RST while the server is still echoing.
        s.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        s.close()
        continue
    s.shutdown(socket.SHUT_WR)
    got = 0
    while True:
        d = s.recv(1 << 16)
        if not d:
            break
        got += len(d)
    assert got == 100_000, f"half-closed client got {got} of 100000 bytes"
    s.close()
c = socket.create_connection(("127.0.0.1", port))
c.sendall(b"still alive")
assert c.recv(100) == b"still alive", "server stopped serving after resets"
print("200 resetting / half-closing clients: survived")
