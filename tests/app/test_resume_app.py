"""R in the app (issue 30): the Plan view opens on a failed run's own plan with the proposed fix, accepted or
dropped field by field, every rule run on the result, `--load` of its checkpoint in the command; the Run
view's attempts line."""

from __future__ import annotations

from app_helpers import make_app
from form_rows import form_row
from textual.widgets import SelectionList, Static
from waiting import until

from backend.cluster.checkpoints import CheckpointChoice
from backend.cluster.dashboard import JobInfo
from backend.cluster.resume import Attempt, ResumePlan, RunPlanSource
from backend.plan.fixes import advise, apply_edits, default_fixes, propose
from backend.plan.spec import build_spec
from backend.plan.submission import spec_metadata
from console.messages import ResumePlanned
from console.views.plan import PlanView
from console.views.run_attempts import chain_line
from console.widgets.layout_form import LayoutForm
from console.widgets.resume_panel import ResumePanel

PRESET = "nemotron-3-ultra-550b-a55b-4layer"
SAVE = "/data/out/261202-100000-001/checkpoints"


def _plan() -> ResumePlan:
    spec = build_spec(PRESET, ["paths.output_dir=/data/out"])
    job = JobInfo(
        submission_id="ultra-console-261202-100000-001",
        status="FAILED",
        metadata={"ultra_console": "1", "run_id": "261202-100000-001", "spec": spec_metadata(spec)},
    )
    book = default_fixes()
    edits = propose(book, "cuda-oom", "train", spec)
    checkpoint = CheckpointChoice(SAVE, 2, 2, (), "node1", "iteration 2")
    return ResumePlan(
        job,
        RunPlanSource(spec, "metadata", SAVE),
        None,
        edits,
        apply_edits(spec, edits),
        checkpoint,
        advise(book, "cuda-oom", [], edits),
        "261202-100000-001",
        (),
    )


async def test_r_opens_the_plan_on_the_run_with_its_fix_field_by_field(tmp_path) -> None:
    app = make_app(tmp_path)
    async with app.run_test(size=(160, 50)) as pilot:
        plan_view = app.query_one(PlanView)
        app.post_message(ResumePlanned(_plan()))
        await until(pilot, lambda: plan_view.resume is not None and plan_view._pending is None, "the resume")
        assert plan_view.edits == {"batch.max_tokens_per_gpu": "512"}
        form = app.query_one(LayoutForm)
        assert form_row(form, "batch.max_tokens_per_gpu").value == "512"
        command = plan_view.command_text
        assert f"--load {SAVE} --ckpt-step 2" in command and "--max-tokens-per-gpu 512" in command
        assert not plan_view.error_findings
        panel = app.query_one(ResumePanel)
        assert panel.display and "attempt 2" in str(panel.query_one("#resume-head", Static).content)
        picks = panel.query_one(SelectionList)
        assert list(picks.selected) == ["batch.max_tokens_per_gpu"]

        picks.focus()
        picks.highlighted = 0
        await pilot.pause()
        assert app.focused is picks, app.focused
        await pilot.press("space")  # drop the tokens edit: the run's own 1024 again
        await until(
            pilot,
            lambda: plan_view.edits == {} and plan_view._pending is None,
            "the edit dropped",
            timeout=10,
        )
        assert "--max-tokens-per-gpu 1024" in plan_view.command_text
        await pilot.press("down", "space")  # take the offered PP 2: the grid rules refuse it
        await until(pilot, lambda: "train.pp" in plan_view.edits, "PP 2 taken")
        assert any("train.pp" in f.fields for f in plan_view.error_findings)
        assert plan_view.check_action("launch", ()) is None
        assert "train.pp" in plan_view.resume_accepted


def test_the_attempts_line_names_each_attempt_and_what_it_died_of() -> None:
    chain = (
        Attempt("job-1", "r1", 1, "FAILED", None, 1_000, 66_000),
        Attempt("job-2", "r2", 2, "RUNNING", "cuda-oom", 70_000, None, 20.0),
    )
    line = chain_line(chain, "job-2")
    assert line.startswith("attempts  1 FAILED cuda-oom 1m05s → 2 RUNNING (this)")
    assert line.endswith(" · trained 45s, lost: cuda-oom 20s")  # 65 s up, 20 s of it after the last save
    assert chain_line(chain[:1], "job-1") == ""
