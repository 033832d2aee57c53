"""Rules, part 1: the setup is wrong (arguments, then, from rules_kv, the KV-cache dtype; remote
code, model)."""

from __future__ import annotations

from kimi_ops.diagnose.model import Rule, _rule
from kimi_ops.diagnose.options import OPTION_KEYWORD, OPTION_NAME
from kimi_ops.diagnose.rules_kv import KV_DTYPE_RULES

_ARGUMENT_RULES: tuple[Rule, ...] = (
    # ---------------------------------------------------------------- bad_argument
    _rule(
        "argparse_error",
        "bad_argument",
        100,
        (": error: ", "unrecognized arguments: ", "Unable to read the config file"),
        [
            r": error: (?P<argerr>(?:unrecognized arguments?|the following arguments are "
            r"required|ambiguous option|argument |invalid choice|unexpected argument|"
            r"expected one argument|one of the arguments).*)",
            # parser.error(MSG) of a vLLM command's own check, under argparse's "PROG: error: "
            # (PROG: "vllm serve", "vllm bench <bench_type> [options] serve", a script's name)
            r"^(?:vllm\b[^:\n]*|[\w.\-]+\.py): error: (?P<argerr>\S.*)",
            # ... its message alone, when a page kept only that line
            r"^(?P<argerr>unrecognized arguments: --?\w.*)",
            # vLLM's parser reading --config's YAML file (0.32 logs this, then re-raises the
            # file's error: FileNotFoundError, a YAML error)
            r"(?P<argerr>Unable to read the config file at \S+?)\.? Check path correctness",
        ],
        "vLLM's argument parser rejected the command line: {argerr}. Fix the profile's "
        "extra_args[[ (now: {extra_args})]][[ - offending: {bad_args}]]: the flag may be "
        "misspelt, removed or renamed in this vLLM version[[ ({vllm_version})]] (e.g. "
        "--disable-log-requests became --no-enable-log-requests), or given a bad value."
        "[[ {serve_note}]]",
        "vLLM rejected its arguments: {argerr}",
        extract=[
            r"unrecognized arguments?: (?P<bad_args>.+?)\s*$",
            r"argument (?P<bad_args>-[-\w/]+)",
            r"ambiguous option: (?P<bad_args>\S+)",
        ],
    ),
    _rule(
        "invalid_option_value",
        "bad_argument",
        98,
        (
            "invalid tool call parser",
            "invalid reasoning parser",
            " requires --",
            " requires `--",
            "instead of via the",
            "Load format `",
        ),
        [
            r"invalid (?P<option>tool call parser|reasoning parser):? '?(?P<bad_value>[\w\-.]+)",
            # the model loader refusing --load-format ("Load format `gguf` is not supported")
            r"(?P<option>Load format) `(?P<bad_value>[\w\-.]+)` is not supported",
            # vLLM's parser refusing a way of giving an option ("With `vllm serve`, you should
            # provide the model as a positional argument ... instead of via the `--model`
            # option")
            r"^[\w.]*(?:Error|Exception)\b.*instead of via the `?(?P<bad_args>--[\w-]+)`? option",
            r"^[\w.]*(?:Error|Exception)\b.*?(?P<bad_args>--[\w-]+)`? requires `?--[\w-]+",
        ],
        "vLLM rejected an option value[[ ({option} '{bad_value}')]][[ ({bad_args})]]: "
        "this vLLM version[[ ({vllm_version})]] does not know it or needs another flag with it."
        " Fix the profile's extra_args[[ (now: {extra_args})]] or upgrade vLLM (the kimi_k2 "
        "tool-call and reasoning parsers need a recent release).",
        "invalid option value[[: {option} {bad_value}]][[: {bad_args}]]",
    ),
    _rule(
        "parallel_size_mismatch",
        "bad_argument",
        97,
        ("divisible by",),
        [
            r"(?P<what>\w[\w ]*?) \(?(?P<count>\d+)?\)? (?:must|should) be divisible by "
            r"(?P<option>tensor|pipeline)[ _]parallel[ _]size(?: \((?P<size>\d+)\))?",
            r"is not divisible by (?P<option>tensor|pipeline)[ _]parallel[ _]size",
            # vLLM's divide() (vllm/distributed/utils.py): only parallel sizes go through it
            r"^AssertionError: (?P<count>\d+) is not divisible by (?P<size>\d+)$",
        ],
        "The model cannot be split over {option}_parallel_size[[ {size}]][[: {what} ({count}) "
        "must be divisible by it]]. Pick a {option}_parallel_size that divides it (e.g. 1, 2, "
        "4) in the profile, or another model.",
        "{option}_parallel_size[[ {size}]] does not divide the model[[ ({what} {count})]]",
    ),
    _rule(
        "not_enough_devices",
        "bad_argument",
        96,
        (
            "required GPUs exceeds",
            "greater than the number of available",
            "is larger than the number of available",
            "Not enough allowed NUMA nodes",
        ),
        [
            # vLLM <= 0.8 raised it (ValueError); later releases only warn and wait for the Ray
            # placement group (the autoscaler may add nodes), then give up after a timeout
            # ("Cannot provide a placement group ... within 1800 seconds"): a cluster that never
            # offered the GPUs, not a size vLLM refused (the engine dies of it, or the program
            # that waited stops)
            r"Error: (?i:the number of required GPUs exceeds the total number of available GPUs)",
            r"(?P<option>tensor|pipeline)_parallel_size \(?(?P<size>\d+)\)? is greater than the "
            r"number of available",
            # vLLM 0.32's ParallelConfig ("World size (8) is larger than the number of ... GPUs")
            r"World size \((?P<size>\d+)\) is larger than the number of available GPUs",
            # the CPU build: one NUMA node per worker (the real engine with TP 4 on one node)
            r"Not enough allowed NUMA nodes to bind threads of (?P<size>\d+) local CPUWorkers",
        ],
        "The parallel sizes ask for more devices than the server has[[ ({option}_parallel_size "
        "{size})]][[ ({size} workers)]]: lower tensor_parallel_size x pipeline_parallel_size in "
        "the profile, or give the server more GPUs (CUDA_VISIBLE_DEVICES, the Ray placement "
        "group; on the CPU build each worker needs a NUMA node of its own).",
        "more devices asked for than available[[ ({option}_parallel_size {size})]]",
    ),
    _rule(
        "fp8_block_tp_mismatch",
        "bad_argument",
        96,
        ("weight quantization block_",),
        # a block-quantized (FP8) checkpoint split over too many GPUs: each shard must hold
        # whole blocks
        [
            r"(?P<what>[\w' ]+ weight) = (?P<count>\d+) is not divisible by weight quantization "
            r"(?P<block>block_[nk] = \d+)"
        ],
        "The block-quantized weights cannot be split over this tensor_parallel_size[[: a "
        "shard of the {what} ({count}) is not a multiple of the quantization {block}]]. Use a "
        "smaller tensor_parallel_size (with data or expert parallelism for the rest), or a "
        "checkpoint without block quantization.",
        "tensor_parallel_size too large for the FP8 block size[[ ({block})]]",
    ),
    _rule(
        "forced_backend_invalid",
        "bad_argument",
        92,
        ("is not valid for this configuration",),
        # the backend the user forced (VLLM_ATTENTION_BACKEND, --attention-backend) cannot
        # run this model / GPU; a KV-cache dtype reason is no_backend_for_kv_dtype's (higher)
        [
            r"Selected backend (?:AttentionBackendEnum\.|_Backend\.)?(?P<backend>\w+) is not "
            r"valid for this configuration\.?(?: Reason: (?P<reason>.+))?"
        ],
        "The attention backend forced in the profile ({backend}, by VLLM_ATTENTION_BACKEND or "
        "--attention-backend) cannot run this configuration[[: {reason}]]. Remove it from the "
        "profile's env / extra_args[[ (now: {extra_args})]] so vLLM picks a backend that can.",
        "forced attention backend {backend} not valid here",
    ),
    _rule(
        "no_backend_for_block_size",
        "bad_argument",
        93,
        ("block_size not supported",),
        # the attention selector's reasons: the KV-cache block size asked for (--block-size)
        # is one no backend takes
        [
            r"No valid attention backend found\b.*\bblock_size=(?P<block_size>\d+)\b.*"
            r"block_size not supported"
        ],
        "No attention backend accepts --block-size {block_size} here: remove --block-size "
        "from the profile's extra_args[[ (now: {extra_args})]] so vLLM picks the block size "
        "its backend needs, or use one the backends list (16, 32 or 64 for most).",
        "no attention backend takes block_size {block_size}",
    ),
    _rule(
        "unexpected_engine_kwarg",
        "bad_argument",
        96,
        ("unexpected keyword argument",),
        [
            r"(?P<where>(?:Async)?EngineArgs|LLM|\w*Config)(?:\.__init__)?\(\) got an unexpected "
            r"keyword argument '(?P<bad_args>\w+)'",
            # Python < 3.10 names no class: the argument is one of vLLM's options
            r"^TypeError: __init__\(\) got an unexpected keyword argument '(?P<bad_args>"
            + OPTION_KEYWORD
            + ")'",
        ],
        "This vLLM[[ ({vllm_version})]] has no option '{bad_args}'[[ ({where} rejected it)]]: it "
        "was renamed or removed, or is newer than this version. Fix the profile's extra_args"
        "[[ (now: {extra_args})]] or the engine arguments, or install the vLLM version they "
        "were written for.",
        "unknown engine option {bad_args}",
    ),
    _rule(
        "quantization_method_unknown",
        "bad_argument",
        85,
        ("Unknown quantization method",),
        # the config check refusing a method name this vLLM does not know, with the list it
        # takes ("Unknown quantization method: gptq. Must be one of ['awq', 'squeezellm']"):
        # a setting refused by name, whether --quantization or the checkpoint's quant_method
        # gave it (the labellers read it so 2 to 1: blind sets L, ZF vs X)
        [
            r"Unknown quantization method:? '?(?P<quantization>[\w\-]+)'?\.?"
            r"(?: Must be one of (?P<supported>\[[^\]]*\]))?"
        ],
        "This vLLM does not know the quantization method {quantization}[[ (it takes "
        "{supported})]]: use a vLLM version that supports {quantization} (the profile's "
        "vllm_version / image), or a checkpoint quantized with a method it lists; if "
        "--quantization in extra_args set it[[ (now: {extra_args})]], drop it or name a listed "
        "method.",
        "unknown quantization method {quantization}",
    ),
    _rule(
        "value_not_among_choices",
        "bad_argument",
        20,
        ("alid options are", "alid choices are"),
        # a setting's value that this vLLM does not know, refused with the list it takes
        # (pydantic's "Value error, Unknown attention backend: 'X'. Valid options are: ...")
        [r"(?P<value>Unknown [\w \-]+?:? '?[\w\-.]+'?)\.? (?i:valid (?:options|choices)) are\b"],
        "vLLM refused a value it does not know ({value}): the message lists the ones it "
        "takes. Use one of them in the profile (extra_args[[, now: {extra_args}]], or the env "
        "variable that sets it), or a vLLM version that has this one.",
        "value not among the choices: {value}",
    ),
    _rule(
        "quantization_arg_mismatch",
        "bad_argument",
        96,
        ("does not match the quantization method",),
        [
            r"model config \((?P<quantization>[\w\-]+)\) does not match the quantization method "
            r"specified in the `?quantization`? argument \((?P<bad_value>[\w\-]+)\)"
        ],
        "--quantization {bad_value} contradicts the checkpoint's own quantization "
        "({quantization}): drop --quantization from the profile's extra_args[[ (now: "
        "{extra_args})]] (vLLM reads it from the checkpoint) or set it to {quantization}.",
        "--quantization {bad_value} does not match the checkpoint ({quantization})",
    ),
    _rule(
        "quantization_flag_without_config",
        "bad_argument",
        96,
        ("Cannot find the config file for",),
        # --quantization X on a checkpoint that has no X quantization config (the real CPU
        # engine's words for --quantization awq on an unquantized model, vLLM 0.32)
        [r"Cannot find the config file for (?P<bad_value>[\w\-]+)"],
        "--quantization {bad_value} is set, but the checkpoint has no {bad_value} quantization "
        "config: drop --quantization from the profile's extra_args[[ (now: {extra_args})]] "
        "for an unquantized checkpoint, or point the profile's model at a {bad_value} one.",
        "--quantization {bad_value} on a checkpoint without {bad_value} config",
    ),
    _rule(
        "argparse_usage",
        "bad_argument",
        60,
        ("usage: ",),
        [r"^usage: \S*(?:vllm|api_server)\S*(?: serve)? \[-h\]"],
        "vLLM printed its usage: its argument parser rejected the command line (the excerpt "
        "is cut before the error line). Fix the profile's extra_args[[ (now: {extra_args})]]: "
        "a flag may be misspelt, removed or renamed in this vLLM version[[ ({vllm_version})]].",
        "vLLM rejected its arguments (usage printed)",
    ),
    _rule(
        "max_model_len_too_large",
        "bad_argument",
        50,
        ("User-specified max_model_len", "support max_model_len"),
        [
            r"User-specified max_model_len \((?P<max_model_len>\d+)\) is greater than the "
            r"derived max_model_len(?: \((?P<derived>[^)]*)\))?",
            # a platform's own limit ("... max_model_len greater than 32768 on N150 ...")
            r"(?i:not support max_model_len (?:greater|larger|longer) than) (?P<derived>\d+)",
        ],
        "--max-model-len[[ {max_model_len}]] is larger than the model supports[[ ({derived})]]:"
        " lower max_model_len in the profile (only set VLLM_ALLOW_LONG_MAX_MODEL_LEN=1 if the "
        "model really supports more, e.g. with RoPE scaling).",
        "max_model_len[[ {max_model_len}]] exceeds the model's maximum",
    ),
    _rule(
        "error_names_option",
        "bad_argument",
        20,
        ("Error", "Value error, ", "Assertion failed, "),
        # the engine's validation refusing a setting names the option to change ("... is
        # larger than max_num_batched_tokens (4096). Please increase max_num_batched_tokens.");
        # any more specific cause (memory, KV cache, dtype) outranks this
        [
            # an exception line, or pydantic's "Value error, ..." / "Assertion failed, ..."
            r"^\s*(?:(?:[\w.]+\.)?(?:Value|Assertion|Validation|NotImplemented|Runtime|Type)Error\b"
            r"|Value error, |Assertion failed, )"
            r".*?\b(?:[Pp]lease|[Tt]ry|[Cc]onsider|[Yy]ou (?:can|may|should|need to|must))\s+"
            r"(?:to\s+)?(?:increas|decreas|reduc|lower|rais|set|specify|pass|enabl|disabl|adjust"
            r"|chang)\w*\s+(?:the\s+|your\s+)?(?:value\s+of\s+)?[`'\"]?"
            r"(?P<bad_args>(?:--)?[a-z][a-z0-9]*(?:[_-][a-z0-9]+)+)",
            # a value over a max_* option's limit ("LoRA rank 32 is greater than max_lora_rank 16")
            r"^\s*(?:[\w.]+\.)?\w*Error\b.*\b(?:greater|larger) than (?P<bad_args>max_[a-z_]+)\b",
            # flags that cannot go together / an env setting refused, named in the message
            r"^\s*(?:[\w.]+\.)?\w*Error\b.*(?P<bad_args>--[a-z][\w-]+)\b.*\b(?:cannot|can't|must "
            r"not|are mutually exclusive)\b",
            # a sentence saying what to pass ("... Pass --numa-bind-nodes explicitly or ...")
            r"^\s*(?:[\w.]+\.)?\w*Error\b.*[.:;] (?:Pass|Set|Specify|Disable|Enable) "
            r"[`'\"]?(?P<bad_args>--[a-z][\w-]+)",
            r"^\s*(?:[\w.]+\.)?\w*Error\b.*\b(?P<bad_args>VLLM_[A-Z0-9_]+)=\S+ is not supported\b",
            # a ValueError whose subject is a flag or a VLLM_* variable and what it needs (flags
            # newer than options.py's list: 0.32's "--grpc-port must be between 0 and 65535",
            # "--weight-cache-master-port is required when ...", "VLLM_PORT 'x' must be a valid
            # integer")
            r"^\s*(?:[\w.]+\.)?ValueError: (?:Error: )?(?P<bad_args>--[a-z][\w-]+|VLLM_[A-Z0-9_]+)"
            r"\b(?: '[^']*'| [^\s,;']+)? (?:is required|requires?|must|should|needs?|overlaps|"
            r"appears to be|is (?:not|invalid)|does not support)\b",
            # vLLM's validation of its options: a ValueError (or pydantic's "Value error, ")
            # whose message names an engine option ("max_cpu_loras (2) must be >= max_loras
            # (4).", "--nnodes 2 requires --data-parallel-backend mp"); not a
            # NotImplementedError, a feature missing ("... Cannot unify by adjusting block_size")
            # (not in pydantic's echo of the arguments after " [type=")
            r"^\s*(?:(?:[\w.]+\.)?ValueError: |Value error, )"
            r"(?:(?! \[type=).)*?(?P<bad_args>" + OPTION_NAME + ")",
        ],
        "vLLM refused a setting and names the option to change: {bad_args}. Adjust it in the "
        "profile (its extra_args[[, now: {extra_args}]]) as the error says.",
        "a setting was refused: change {bad_args}",
    ),
    _rule(
        "config_refused",
        "bad_argument",
        15,
        ("validation error",),
        # pydantic validating a vLLM config class (LoRAConfig, ModelConfig...): the message
        # (a fact, config_error) is on the next line. The scanner also records this rule for
        # a ValueError raised in vLLM's config code (scanner._note_config_refusal).
        [r"ValidationError: (?P<refusal>\d+ validation errors? for \w*Config)\b"],
        "vLLM's configuration check refused a setting: [[{config_error}||{refusal}]]. Change "
        "that setting in the profile (its extra_args[[, now: {extra_args}]]) or the engine "
        "arguments; the check that raised it is in vLLM's config / argument code"
        "[[ ({vllm_version})]].",
        "a setting was refused: [[{config_error}||{refusal}]]",
    ),
)
_MODEL_RULES: tuple[Rule, ...] = (
    # ----------------------------------------------------------- trust_remote_code
    _rule(
        "trust_remote_code",
        "trust_remote_code",
        90,
        (
            "custom code",
            "requires you to execute",
            "trust_remote_code=True",
            "trust-remote-code",
            "resolve_trust_remote_code",
        ),
        [
            r"contains custom code (?:which|that) must be executed",
            r"requires you to execute the (?:\w+ )?(?:file|code)",
            r"(?:pass the argument|set the option|consider setting|Please pass) "
            r"`?trust_remote_code=True`?",
            r"Failed to load the model config.*trust[_-]remote[_-]code",
            r"(?:, in |= )resolve_trust_remote_code\b",
        ],
        "The model[[ {model}]] ships custom Python code: set `trust_remote_code: true` in the "
        "profile (adds --trust-remote-code) and redeploy.",
        "the model needs trust_remote_code",
        extract=[r"(?:Loading|repository for) (?P<model>\S+?)/? (?:requires|contains)"],
    ),
    # ------------------------------------------------------------- model_not_found
    _rule(
        "model_not_found",
        "model_not_found",
        85,
        (
            "Invalid repository ID",
            "does not appear to have a file named",
            "NotExistError",
            "failed to access model",
            "HFValidationError",
            "Repo id must",
            "RepositoryNotFoundError",
            "Repository Not Found",
            "RevisionNotFoundError",
            "Revision Not Found",
            "is not a local folder",
            "Client Error",
            "GatedRepoError",
            "gated repo",
            "Can't load the configuration",
            "Incorrect path_or_model_id",
            "LocalEntryNotFoundError",
            "We couldn't connect to",
            "OfflineModeIsEnabled",
            "No supported config format",
            "Could not detect config format",
            "config.json",
            "is restricted",
            "Cannot find any model weights",
            "Cannot find any safetensors model weights",
            "Could not find checkpoint files",
            "CAS service error",
            "Server Error",
            "not a valid JSON file",
            "IncompleteSnapshot",
            "specific connection error",
            "valid git identifier",
            "NotFound: no Models",
            "Cache directory not found",
            "Max retries exceeded",
            "Read timed out",
            "Can't load tokenizer for",
            "Error no file named",
            "No tokenizer file found",
            "Mistral tokenizer is present",
            "HfHubHTTPError",
            "Unauthorized",
            "Forbidden",
            ".incomplete'",
            " not exists on ",
            "initializing ngc repo",
        ),
        [
            r"Invalid repository ID or local directory specified:? '?(?P<model>[^'\s]+)?",
            r"(?:^|\s)(?:(?P<model>[\w.\-/]+) )?does not appear to have a file "
            r"named (?P<missing_file>(?:config|params)\.json|"
            r"[\w.\-]+\.(?:safetensors|bin|gguf|py))",
            # ... the same raised, its file name wrapped away from the line (a page's paste)
            r"^(?:[\w.]+\.)?OSError: (?:(?P<model>[\w.\-/]+) )?does not appear to have a file "
            r"named\s*$",
            r"^(?:[\w.]+\.)?HFValidationError\b",
            r"Repo id must (?:be in the form|use alphanumeric)[^:]*(?::\s*'(?P<model>[^']+)')?",
            r"RepositoryNotFoundError|Repository Not Found for url",
            r"RevisionNotFoundError|Revision Not Found for url",  # no such branch / tag / commit
            r"'?(?P<model>[^'\s]+?)'? is not a local folder (?:and is not a valid model "
            r"identifier|or a valid repository name)",
            # transformers' gated repo, missing revision, broken config.json, Hub unreachable
            r"You are trying to access a gated repo|(?P<model>\S+) is a gated repository\b",
            r"is not a valid git identifier \(branch name, tag name or commit id\)",
            r"config file at '(?P<model>[^']+?)(?:/config\.json)?' is not a valid JSON file",
            r"There was a specific connection error when trying to load (?P<model>\S+?):",
            r"^(?:[\w.]+\.)?IncompleteSnapshotError\b",
            r"NotFound: no Models with name '(?P<model>[^']+)' found",  # BentoML's model store
            r"Cache directory not found: \S+ Please use `cache_dir`",  # huggingface_hub's cache
            r"(?:40[13]|429) Client Error.*huggingface",  # (429: the Hub's rate limit)
            # ... in another client's words (a Rust front end's reqwest: "HTTP status client
            # error (401 Unauthorized) for url (https://huggingface.co/..")
            r"\b40[13] (?:Unauthorized|Forbidden)\b.*\bhttps://huggingface\.co/",
            # transformers: no tokenizer files / no weight file of any format at that path
            r"Can't load tokenizer for '(?P<model>[^']+)'",
            r"Error no file named [\w.]+(?:, [\w.]+)*,? or [\w.]+ found in directory "
            r"(?P<model>\S+?)\.?$",
            r"404 Client Error.*(?:Repository Not Found|/config\.json|/params\.json)",
            # mistral-common's tokenizer loader: no tokenizer file in the model directory
            r"No tokenizer file found in directory:? (?P<model>\S+?)\.?$",
            r"Make sure that a Mistral tokenizer is present in\b",  # (--tokenizer-mode mistral)
            # huggingface_hub's own HTTP error while fetching the files (a 416 on a resumed
            # download, a 5xx of the Hub's CDN): the files could not be had
            r"^(?:[\w.]+\.)?HfHubHTTPError: \d{3} (?:Client|Server) Error\b",
            r"40[134] Client Error.*modelscope\.cn/api/v1/models/",
            # ModelScope's hub: no such model / revision, or a private one without a token
            r"\bNotExistError\b.*\b(?:model|revision)",
            r"failed to access model\b.*\bmay not exist or may be\s+private",
            r"\bRepo (?P<model>\S+) not exists on (?:either )?https?://",  # (its hub's logger)
            # NVIDIA NIM: its model store could not be set up from NGC (credentials, network, a
            # missing model), so the profile's files could not be had
            r"initializing ngc repo from repo_id: (?P<model>ngc://[^\s\",]+)",
            r"GatedRepoError|Cannot access gated repo|Access to model \S+ is restricted",
            r"Can't load the configuration of '(?P<model>[^']+)'",
            r"Incorrect path_or_model_id:? '(?P<model>[^']*)'",  # ('' : no model given)
            r"^(?:[\w.]+\.)?LocalEntryNotFoundError\b",
            r"^(?:[\w.]+\.)?OfflineModeIsEnabled\b",
            r"^(?:[\w.]+\.)?HTTPError: 40[13] Client Error",
            r"^[\w.]*(?:Error|Exception)\b.*We couldn't connect to '?https://huggingface\.co",
            # requests / urllib3 giving up on the Hub (a timeout, no route, a proxy; a read that
            # timed out is not retried)
            # (the host quoted as repr quotes it inside a repr: host=\'huggingface.co\'; a paste
            # that joined the traceback into one line has the exception after its frames)
            r"(?:^|\s)[\w.]*(?:ConnectTimeout|ConnectionError|ReadTimeout)\b.*host=\\?'"
            r"(?:huggingface\.co|hf-mirror\.com|[\w.\-]*\.hf\.co|(?:www\.)?modelscope\.cn)\\?'"
            r".*(?:Max retries exceeded|Read timed out)",
            # the Hub itself failing (503, 502...) while vLLM fetched the model's files / info
            r"\b5\d\d Server Error\b.*\bhttps://huggingface\.co/",
            r"No supported config format found in (?P<model>\S+)",
            # V0's weight loader: no weight files at that path / repo
            r"Cannot find any (?:safetensors )?model weights with [`']?(?P<model>[^'`\s)]+)",
            r"Could not find checkpoint files '(?P<missing_file>[^']+)'",
            # the Hub's xet storage failing to send the files
            r"CAS service error\b.*\bhf\.co\b",
            r"Could not detect config format",
            r"(?:No such file or directory|FileNotFoundError).*'(?P<model>[^']*?)/config\.json'",
            # a blob of the Hub's cache still being downloaded (or given up on) is gone
            r"No such file or directory: '[^']*/blobs/\w+\.incomplete'",
        ],
        "vLLM could not find or load the model[[ '{model}']]. Check the `model` path in the "
        "profile: a directory on the GPU host containing config.json and the weights, or a "
        "valid Hugging Face repo id; for Hub downloads also check HF_TOKEN (gated repos) and "
        "the host's network access.",
        "model not found or not accessible[[: {model}]]",
    ),
    _rule(
        "hub_request_failed",
        "model_not_found",
        84,
        ("thrown while requesting",),
        # huggingface_hub retrying a request for the model's files ("'[Errno 104] Connection
        # reset by peer' thrown while requesting HEAD https://huggingface.co/<repo>/resolve/
        # main/config.json", then "Retrying in 1s [Retry 1/5]."): a failure only when the
        # process then fails (retries that succeed go on loading)
        [
            r"thrown while requesting (?:HEAD|GET) https://(?:huggingface\.co|hf-mirror\.com"
            r"|[\w.\-]*\.hf\.co)/(?:api/models/)?(?P<model>[\w.\-]+/[\w.\-]+)"
        ],
        "The model's files could not be fetched from the Hub[[ ({model})]]: its requests kept "
        "failing and the process then failed. Check the host's network access to "
        "huggingface.co (a proxy, HF_ENDPOINT), or download the model once and point the "
        "profile's `model` at the local directory (HF_HUB_OFFLINE=1).",
        "model files not reachable on the Hub[[: {model}]]",
        weak=True,
    ),
    _rule(
        "weights_file_corrupt",
        "model_not_found",
        84,
        (
            "Error while deserializing header",
            "PytorchStreamReader failed",
            "integrity check failed",
            "Consistency check failed",
        ),
        # a weight file that is not whole: a truncated safetensors shard (the real CPU
        # engine's words, vLLM 0.32), a broken .bin (torch's zip reader), a download whose
        # check failed (ModelScope's hub: its sha256; huggingface_hub: its size)
        [
            r"Error while deserializing header: (?P<why>[\w ,]+)",
            r"PytorchStreamReader failed (?P<why>[\w ,]+)",
            r"FileIntegrityError: File \S+ (?P<why>integrity check failed)",
            r"(?P<why>Consistency check failed: file should be of size \d+ but has size \d+)",
        ],
        "A weight file of the model is not whole[[ ({why})]]: an interrupted download or copy. "
        "Compare the shard sizes with the source's and download the checkpoint again[[ into "
        "{model}]].",
        "a weight file is corrupt or truncated[[ ({why})]]",
    ),
    _rule(
        "tokenizer_files_missing",
        "model_not_found",
        84,
        ("instantiate the backend tokenizer",),
        # transformers with no tokenizer.json (nor a slow tokenizer's files) in the model
        # directory (the real CPU engine's words, vLLM 0.32)
        [r"Couldn't instantiate the backend tokenizer"],
        "The model's tokenizer files are missing or unusable (no tokenizer.json, nor a "
        "tokenizer.model with sentencepiece installed): copy the checkpoint's tokenizer files "
        "into the model directory[[ ({model})]], or set --tokenizer in extra_args to a "
        "directory or repo that has them.",
        "tokenizer files missing from the model",
    ),
    _rule(
        "harmony_vocab_unavailable",
        "model_not_found",
        84,
        ("loading vocab file",),
        # gpt-oss's tokenizer (openai_harmony) fetches its encoding's vocab file (o200k_base)
        # from the network at first use; offline, or behind a TLS-intercepting proxy, it cannot
        # ("HarmonyError: error downloading or loading vocab file: failed to download or load
        # vocab file"); at startup the server dies of it (after, one request fails)
        [r"error downloading or loading vocab file"],
        "gpt-oss's tokenizer (openai_harmony) could not obtain its vocab file, which it "
        "downloads from openaipublic.blob.core.windows.net at first use: the host has no "
        "access (air-gapped, or a TLS-intercepting proxy). Put o200k_base.tiktoken in a "
        "directory on the host and set TIKTOKEN_ENCODINGS_BASE to it in the profile's env.",
        "gpt-oss tokenizer vocab file not obtainable (offline?)",
    ),
)
#: The KV-cache dtype rules (rules_kv.py) keep their place in the table, after the arguments'.
SETUP_RULES: tuple[Rule, ...] = _ARGUMENT_RULES + KV_DTYPE_RULES + _MODEL_RULES
