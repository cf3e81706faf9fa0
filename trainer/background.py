"""One background write at a time: weight folders and checkpoints are written in a thread
while the next step trains; the training thread waits for the previous write before it starts
the next, and gets any error the write raised."""

import threading
import time
from collections.abc import Callable


class BackgroundWriter:
    """Runs one write at a time in a thread; an error in it is raised by the next `wait`."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.thread: threading.Thread | None = None
        self.error: BaseException | None = None
        self.last_write_s = 0.0

    def submit(self, write: Callable[[], None]) -> float:
        """Start `write` once the previous one is done; returns the seconds spent waiting."""
        waited = self.wait()
        self.thread = threading.Thread(target=self.run, args=(write,), name=self.name)
        self.thread.start()
        return waited

    def run(self, write: Callable[[], None]) -> None:
        start = time.perf_counter()
        try:
            write()
        except BaseException as err:  # handed to the training thread by wait()
            self.error = err
        self.last_write_s = time.perf_counter() - start

    def wait(self) -> float:
        """Block until the write in flight (if any) is done; re-raise its error."""
        start = time.perf_counter()
        if self.thread is not None:
            self.thread.join()
            self.thread = None
        error, self.error = self.error, None
        if error is not None:
            raise error
        return time.perf_counter() - start
