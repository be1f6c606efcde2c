"""A TCP proxy a test can cut and restore: an outage of the server behind it, as its clients see one.

Cut, it drops every open connection and refuses new ones (its port is closed), as a stopped or
restarting Postgres does; restored, it listens on the same port again. The real server behind it keeps
running, so tests sharing that server are not disturbed.
"""

from __future__ import annotations

import socket
import threading

from sqlalchemy.engine import make_url

from infra.processes import free_port


class TcpProxy:
    def __init__(self, target_host: str, target_port: int) -> None:
        self.target = (target_host, target_port)
        self.port = free_port()
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._listener: socket.socket | None = None

    def start(self) -> TcpProxy:
        listener = socket.create_server(("127.0.0.1", self.port))  # SO_REUSEADDR: restore() binds it again
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()
        return self

    def cut(self) -> None:
        """Refuse new connections and drop the open ones."""
        with self._lock:
            listener, self._listener = self._listener, None
            dropped, self._open = self._open, []
        if listener is not None:
            # shutdown first: close() alone leaves the port listening while the accept thread is blocked
            # on it, so a restore could not bind it again
            try:
                listener.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            listener.close()
        for s in dropped:
            _close(s)

    def restore(self) -> None:
        self.start()

    def stop(self) -> None:
        self.cut()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:  # closed by cut()
                return
            try:
                upstream = socket.create_connection(self.target)
            except OSError:
                _close(client)
                continue
            with self._lock:
                if self._listener is not listener:  # cut meanwhile
                    _close(client)
                    _close(upstream)
                    continue
                self._open += [client, upstream]
            for src, dst in ((client, upstream), (upstream, client)):
                threading.Thread(target=_pump, args=(src, dst), daemon=True).start()


def _pump(src: socket.socket, dst: socket.socket) -> None:
    try:
        while data := src.recv(65536):
            dst.sendall(data)
    except OSError:
        pass
    _close(src)
    _close(dst)


def _close(s: socket.socket) -> None:
    try:
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    s.close()


def database_behind_proxy(settings):
    """(a started proxy in front of the settings' Postgres, the settings with their database reached only
    through it)."""
    url = make_url(settings.database.url)
    proxy = TcpProxy(url.host, url.port).start()
    database = settings.database.model_copy(update={"url": url.set(port=proxy.port).render_as_string(False)})
    return proxy, settings.model_copy(update={"database": database})
