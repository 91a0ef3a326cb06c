"""What the dead-code check (vulture, pyproject's [tool.vulture]) cannot see being used, each with its reason.

vulture reads only backend, console and shim: a name that only tests call is reported, so it belongs here only
when something outside our code reads it (a framework, Ray, a serialiser) or it is state a test observes.
"""

# ruff: noqa: B018
_: object = object

# Set on objects a framework reads: Textual's styles and widgets, zipfile's ZipInfo, the Ray GPU provider and
# torch device properties that the fake GPUs stand in for, tqdm's interface that huggingface_hub calls.
_.max_height, _.padding, _.disabled, _.CSS_PATH, _.TITLE, _._on_key
_.external_attr, _.compress_type
_._initialized, _.is_available, _._shutdown, _.get_gpu_utilization, _.total_memory
_.set_description
_.viewport  # a parameter of Textual's get_content_height signature
_.setup  # shim.ray_hook.setup: Ray's worker_process_setup_hook, named by string in the job's runtime env
_.EventsView  # loaded by its module path in console/app.py (until views are imported by name)

# Fields of typed records, filled from what they parse and serialised whole (asdict / to_json / model_dump).
_.stop_sent, _.driver_exit_code, _.cpu_s, _.read_at, _.seen_in, _.gpu_processes, _.examples, _.simulated
_.family, _.total_params_b
_.lease_timeout, _.max_age  # the GPU probe's Options (a TypedDict: read by key in its hub)
_.tokens_per_gpu_per_sec, _.cluster_tokens_per_sec, _.effective_tokens_per_gpu_per_sec
_.wait_time_ratio, _.rollout_over_train, _.fraction, _.train_steps_done, _.median_rollout_s
_.util_mean, _.util_min, _.median_s, _.open_s

# Counters and read-only views of state that tests and benches observe (how many requests, lines, builds).
_.requests_made, _.malformed, _.bytes_read, _.duplicates, _.shim_lines_seen, _.builds, _.pending_text
_.shim_reports, _.current_path, _.severity_of, _.installed
_.load_preset  # the spec loader tests and the demo use (the console loads presets as dicts)
_.kill_node, _.fake_gpu_dir, _.session_dir  # the loopback cluster's handles for tests and benches
_.find_class, _.persistent_load  # pickle.Unpickler's hooks, called by pickle itself
_.write_torch_zip, _.load_path  # rollout-file writer and reader (tests; the sim next)
_.collective_cause  # the NCCL timeout's cause from dumps, for the failure diagnosis (fail26 plugs it in)
_.clean_chunk  # the chunk sanitiser without its count, as the sanitiser tests call it (the store counts)

# The rollout samples (issue 28): count_of is what the tests ask of a rollout's zero-std counts.
_.count_of

# reprlib.Repr's limits and its per-type hook, read by reprlib itself (rollout_data's bounded display).
_.maxlevel, _.maxlist, _.maxtuple, _.maxdict, _.maxset, _.maxfrozenset, _.maxstring, _.maxother, _.repr_int
