"""The cluster: everything that talks to Ray.

Owns the dashboard client (httpx: Jobs API, nodes, logs), per-node GPU telemetry and its age (Ray's
reporter, and miles' own GPU streams where a run writes them), preflight and prepare, the run controller
(launch, attach, watch) with its abort policy, what an abort loses and how long a run went, leftovers read
on the node after a run (the node-pinned reaper job, which signals only provably the job's PIDs), and the
operator's audit log. Every call that changes the cluster starts here.
"""
