"""What blind set ZK's misses taught (2026-12-05), each as a general fact, in lines shaped like
the ones the misses held (not copies of them). Each test failed before, but for its guards,
which passed before and must go on passing."""

from __future__ import annotations

from kimi_ops.diagnose import diagnose

#: An app that builds its engine in its ASGI lifespan: uvicorn starts first, the engine after.
APP_STARTING = (
    "INFO 03-02 10:00:01 [__init__.py:244] Automatically detected platform cuda.\n"
    "INFO:     Started server process [4242]\n"
    "INFO:     Waiting for application startup.\n"
    "INFO 03-02 10:00:09 [__init__.py:31] Available plugins for group vllm.general_plugins:\n"
)
LIFESPAN_TRACEBACK = (
    "ERROR:    Traceback (most recent call last):\n"
    '  File "/opt/venv/lib/python3.11/site-packages/starlette/routing.py", line 693, in '
    "lifespan\n"
    "    async with self.lifespan_context(app) as maybe_state:\n"
    '  File "/srv/tts/app.py", line 40, in lifespan\n'
)


def test_the_apps_startup_failing_after_uvicorn_only_started_is_no_server_up() -> None:
    # uvicorn's "Started server process" / "Waiting for application startup" come before an
    # app's own startup (its lifespan) builds the engine: a traceback through that lifespan,
    # or uvicorn's "Application startup failed", means the server never came up
    for failure in (LIFESPAN_TRACEBACK, "ERROR:    Application startup failed. Exiting.\n"):
        d = diagnose(APP_STARTING + failure)
        assert d.label == "unknown", (failure, d.summary)  # (no cause in the excerpt)
    # ... also when a page collapsed the whole paste into one line
    one_line = " ".join((APP_STARTING + LIFESPAN_TRACEBACK).split())
    assert diagnose(one_line).label == "unknown"
    # guard: uvicorn started, nothing more yet, is read as before
    assert diagnose(APP_STARTING).label == "healthy"


def test_a_lifespan_traceback_after_startup_complete_is_still_a_server_that_was_up() -> None:
    # guard: the lifespan's shutdown raising after "Application startup complete" (Ctrl-C in
    # a notebook) is no failed start
    up = (
        "INFO:     Started server process [4242]\n"
        "INFO:     Waiting for application startup.\n"
        "INFO:     Application startup complete.\n"
        "INFO:     Shutting down\n"
        "ERROR:    Traceback (most recent call last):\n"
        '  File "/opt/venv/lib/python3.11/site-packages/starlette/routing.py", line 701, in '
        "lifespan\n"
        "    await receive()\n"
    )
    assert diagnose(up).label == "healthy"
    # guard: the same line before any HTTP start is the failure it was
    assert diagnose(LIFESPAN_TRACEBACK).label == "unknown"


def test_the_v0_model_configs_task_line_is_the_engine_being_set_up() -> None:
    # V0's model config says which tasks the model supports as the engine is set up; after a
    # bare uvicorn start that is an app building its engine, not a server up
    d = diagnose(
        APP_STARTING + "INFO 03-02 10:00:09 [config.py:793] This model supports multiple tasks: "
        "{'generate', 'embed'}. Defaulting to 'generate'.\n"
    )
    assert d.label == "starting", d.summary
    assert d.stage == "initializing_engine"


def test_modelscope_saying_the_repo_does_not_exist_is_model_not_found() -> None:
    # ModelScope's hub (VLLM_USE_MODELSCOPE=True) logs its own words for a missing repository
    for line in (
        "modelscope - ERROR - Repo acme/llama-tiny not exists on either "
        "https://www.modelscope.cn/ or https://www.modelscope.ai/",
        "2026-03-02 10:00:09,123 - modelscope - ERROR - Repo acme/llama-tiny not exists on "
        "https://www.modelscope.cn/",
    ):
        d = diagnose(line + "\n")
        assert d.label == "model_not_found", (line, d.summary)
        assert d.facts.get("model") == "acme/llama-tiny"
    # guard: a repository that exists on one of them is no failure
    assert diagnose("modelscope - INFO - Repo acme/llama-tiny exists on modelscope\n").label == (
        "starting"
    )


def test_a_wrap_that_cuts_a_record_right_after_its_logger_head_is_still_joined() -> None:
    # a worker's error logger prints the traceback one record a line; when its head
    # ("... ERROR 04-23 01:03:33 [multiproc_executor.py:470]") fills the terminal's width, the
    # rest (the frame, indented) begins with spaces, as a record of its own could: vLLM puts a
    # record's message on its head's line, so it is that line's rest
    head = "(VllmWorker rank=1 pid=4242) ERROR 04-23 01:03:33 [multiproc_executor.py:470]"
    frames = (
        '  File "/opt/venv/lib/python3.12/site-packages/vllm/model_executor/models/llama.py", '
        "line 360, in forward",
        "    hidden_states = self.model(input_ids, positions)",
        '  File "/opt/venv/lib/python3.12/site-packages/torch/nn/modules/module.py", line 1750, '
        "in _call_impl",
        "    return forward_call(*args, **kwargs)",
    )
    text = "".join(f"{head} {frame}\n" for frame in frames)
    width = len(head)
    wrapped = "\n".join(
        piece
        for line in text.splitlines()
        for piece in (line[k : k + width] for k in range(0, len(line), width))
    )
    assert diagnose(text).label == "engine_dead_other"
    assert diagnose(wrapped + "\n").label == "engine_dead_other"
