"""The cluster: everything that talks to Ray.

Owns the dashboard client (httpx: Jobs API, nodes, logs), per-node GPU telemetry and its age, preflight
and prepare, the run controller (launch, attach, abort policy), leftovers read on the node after a run and
the node-pinned reaper job, and the operator's audit log. Every call that changes the cluster starts here.
"""
