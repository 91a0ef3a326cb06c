"""xdist's group scheduler, safe when a worker dies mid-run (pytest-timeout's thread method ends the worker
with os._exit when a test hangs).

pytest-xdist 3.8.0's LoadScopeScheduling hangs the whole run after a worker crash (pytest-xdist issues
1323, 1327, 1378): the dead worker's completed groups go back on the queue as empty work units, each eating
a reschedule, and a replacement worker handed one test waits for a second that never comes. On CI that
turns one failed test into a run killed at the time limit. This subclass, installed by tests/conftest.py's
`pytest_xdist_make_scheduler`, re-queues only the unfinished groups (first, so a live worker takes them
next), never re-runs the test the worker died in (it is already reported failed), skips empty units, and
shuts a worker down once nothing is left so it runs its last test.
"""

from __future__ import annotations

from xdist.scheduler.loadgroup import LoadGroupScheduling
from xdist.workermanage import WorkerController

Workload = dict[str, dict[str, bool]]


class CrashSafeGroupScheduling(LoadGroupScheduling):
    def remove_node(self, node: WorkerController) -> str | None:
        workload: Workload = self.assigned_work.pop(node)
        crashed = next((n for unit in workload.values() for n, done in unit.items() if not done), None)
        if crashed is None:
            return None
        workload[self._split_scope(crashed)][crashed] = True
        for scope, unit in workload.items():
            if not all(unit.values()):
                self.workqueue[scope] = unit
                self.workqueue.move_to_end(scope, last=False)
        for other in self.assigned_work:
            self._reschedule(other)
        return crashed

    def _assign_work_unit(self, node: WorkerController) -> None:
        """The next unit with tests left to run (a re-queued unit may have none)."""
        collection = self.registered_collections[node]
        while self.workqueue:
            scope, unit = self.workqueue.popitem(last=False)
            todo = [collection.index(n) for n, done in unit.items() if not done]
            if todo:
                self.assigned_work.setdefault(node, {})[scope] = unit
                node.send_runtest_some(todo)
                return

    def _reschedule(self, node: WorkerController) -> None:
        if node.shutting_down:
            return
        if self.workqueue and self._pending_of(self.assigned_work.get(node, {})) <= 2:
            self._assign_work_unit(node)
        if not self.workqueue:
            node.shutdown()
