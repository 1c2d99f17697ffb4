"""The CLI's bad inputs as one table: each row's arguments must exit with its
code (2: the user's error) and print one line on stderr containing its needle.

test_cli_errors.py runs one test per row, named by its arguments. A
`{name}` in the arguments or the needle is the path that the fixture of that
name makes (conftest.py here, or ../conftest.py for what tests/e2e reads
too): a file with bad content, a folder of mutated profiles, plans or steps,
what mutwo wrote. `unless="cuda"` marks a row skipped when
the build has CUDA (the command then does not exit 2). `before_work=True`
marks a refusal that must come before any work: the row runs without
--quiet, so that profiling (or sweeping, or a max-batch trial) would print
its progress lines on stderr, and the test also checks that nothing was
written under `{out}`.
"""
from typing import NamedTuple


class Case(NamedTuple):
    args: str  # split like a shell's words, then each `{name}` filled
    code: int
    needle: str
    unless: str = ""
    before_work: bool = False


CASES: list[Case] = [
    # Options and commands.
    Case("run --model nope --steps 1", 2, "unknown model 'nope'"),
    Case("run --batch abc", 2, "--batch"),
    Case("run --batch -3", 2, "--batch"),
    Case("run --steps 0", 2, "--steps"),
    Case("run --device tpu --steps 1", 2, "unknown device 'tpu'"),
    Case("run --optimizer rmsprop", 2, "--optimizer"),
    Case("frobnicate", 2, "frobnicate"),
    Case("run --dropout 1.5", 2, "--dropout"),
    Case("run --model mlp --cuda-graph --steps 1", 2, "--cuda-graph needs --device cuda"),
    Case("run --model mlp --optimizer adam --cuda-graph --steps 1", 2, "bias correction"),
    Case("run --model mlp --no-fuse-loss --steps 1", 2, "--no-fuse-loss requires --graph"),
    Case("run --graph {bad_ir} --steps 1", 2, "--graph {bad_ir}: line 1"),
    Case("run --device cuda --steps 1", 2, "CUDA", unless="cuda"),
    # The arena (--arena) and the persistent state past --device-memory: exits 3 with the planned size.
    Case("run --model mlp --batch 64 --arena --device-memory 6MiB --steps 1", 3,
         "the planned arena of 2.7 MiB (2809984 bytes)"),
    Case("optimize --model mlp --batch 8 --budget 60% --arena --cuda-graph --quiet --out {blocker}/a", 2,
         "--arena with --cuda-graph"),
    Case("info --image-size 0", 2, "--image-size"),
    # mutwo many: one learning rate for all copies or one per copy; at least one copy.
    Case("many --model mlp --copies 3 --lrs 0.1,0.2 --steps 1", 2,
         "--lrs has 2 learning rates for 3 copies: give one for all copies or 3, one per copy"),
    Case("many --model mlp --copies 2 --lrs 0.1,x --steps 1", 2, "'x' is not a learning rate"),
    Case("many --model mlp --copies 0 --steps 1", 2, "--copies: must be a positive integer"),
    Case("many --model mlp --copies 2 --lr 0.1 --lrs 0.1 --steps 1", 2, "excludes"),
    # many --memory CAP: a size (free: on CUDA), refused before any count is tried.
    Case("many --model mlp --copies 2 --memory abc --steps 1", 2, "--memory: 'abc' is not a size", before_work=True),
    Case("many --model mlp --copies 0 --memory 8MiB --steps 1", 2, "--copies: must be a positive integer"),
    Case("many --model mlp --copies 2 --memory free --steps 1", 2, "--memory free means what is free on a CUDA card",
         unless="cuda", before_work=True),
    Case("run --data /nonexistent/file.txt", 2, "--data"),
    # An --out that cannot be a folder is exit 2 naming it (a file stands in the way).
    Case("optimize --model mlp --batch 8 --budget 90% --steps 1 --quiet --out {blocker}/o", 2,
         "cannot make the folder {blocker}/o"),
    Case("sweep --model mlp --batches 8 --steps 1 --quiet --out {blocker}/s", 2, "cannot make the folder {blocker}/s"),
    Case("profile --model mlp --batch 8 --quiet --out {blocker}/p", 2, "cannot make the folder {blocker}/p"),
    # A --memory-snapshot that cannot be written is refused before anything runs
    # or is written (test_cli_errors.py: nothing left behind).
    Case("profile --model mlp --batch 8 --quiet --out {out}/p --memory-snapshot /nonexistent/snap.pickle", 2,
         "cannot write /nonexistent/snap.pickle: the folder /nonexistent does not exist"),
    Case("optimize --model mlp --batch 8 --budget 90% --steps 1 --quiet --out {out}/o --memory-snapshot {out}", 2,
         "cannot write {out}: it is a folder"),
    Case("profile --model mlp --batch 8 --quiet --out {out}/p --memory-snapshot {blocker}/snap.pickle", 2,
         "cannot write {blocker}/snap.pickle: {blocker} is not a folder"),
    # A loaded graph that recomputes a random op without its generator state, or
    # names no outputs, is refused: it could not run as planned.
    Case("run --graph {graphs}/random.ir --steps 1", 2,
         "dropout_mask may not be recomputed without its generator state: it is random"),
    Case("run --graph {graphs}/mlp.ir --model bert-base --steps 1", 2, "--model excludes --graph"),
    Case("run --graph {graphs}/mlp.ir --batch 8 --steps 1", 2, "--batch excludes --graph"),
    Case("run --graph /dev/zero --steps 1", 2, "/dev/zero is not a regular file"),
    Case("run --device cudax --steps 1", 2, "unknown device 'cudax'"),
    Case("info --batch 4611686018427387904", 2, "more than 2^50 elements"),
    Case("plan --profile {graphs}/deep.json --budget 60%", 2, "nested deeper than 64 levels"),
    Case("run --graph {graphs}/deep.json --steps 1", 2, "nested deeper than 64 levels"),
    Case("run --graph {graphs}/no_outputs.ir --steps 1", 2, "the graph names no outputs"),
    # A profile is validated after parsing: each mutation exits 2 naming the field, never a crash.
    Case("plan --profile {profiles}/rank.json --budget 60% --out {out}/plan.json", 2, "rank"),
    Case("plan --profile {profiles}/negative_ms.json --budget 60% --out {out}/plan.json", 2, "must not be negative"),
    Case("plan --profile {profiles}/reversed.json --budget 60% --out {out}/plan.json", 2, "rank"),
    Case("plan --profile {profiles}/fractional_batch.json --budget 60% --out {out}/plan.json", 2,
         "'batch' must be an integer"),
    Case("plan --profile {profiles}/fractional_version.json --budget 60% --out {out}/plan.json", 2,
         "'version' must be an integer"),
    Case("plan --profile {profiles}/value_rank.json --budget 60% --out {out}/plan.json", 2, "is not a node"),
    Case("plan --profile {profiles}/value_bytes.json --budget 60% --out {out}/plan.json", 2, "bytes"),
    Case("plan --profile {profiles}/node_name.json --budget 60% --out {out}/plan.json", 2, "zzz"),
    Case("plan --profile {profiles}/profile.json --budget 9223372036854775808 --out {out}/plan.json", 2,
         "more than 1 PiB"),
    # mutwo train's text.
    Case("train --model transformer-lm --data {short_text} --batch 256", 2, "a file of at least 5688 bytes is needed"),
    Case("train --model transformer-lm --batch 8", 2, "train needs --data FILE"),
    Case("train --model bert-tiny --data {text} --batch 2", 2, "does not read text"),
    # BERT's options.
    Case("info --model bert-tiny --seq 32 --pad 32", 2, "--pad 32 must leave at least one"),
    Case("info --model mlp --head none", 2, "--pad and --head are BERT options"),
    # mutwo report: a plan made from another profile, a profile or a plan it cannot read.
    Case("report --profile {reports}/q/profile.json --plan {mlp_report}/plan.json --out {out}/r", 2,
         "pass the profile the plan was made from"),
    Case("report --profile {reports}/none.json --out {out}/r", 2, "cannot read profile {reports}/none.json"),
    Case("report --profile {mlp_report}/profile.json --plan {reports}/bad_plan.json --out {out}/r", 2,
         "{reports}/bad_plan.json: missing field 'model'"),
    # --dump-ir-after: an unknown pass is refused naming the passes.
    Case("show --model mlp --dump-ir-after reinplace,cse", 2,
         "unknown pass 'cse'; passes: autodiff, reinplace, data-parallel, recompute, update-early, swap, or all"),
    # A captured CUDA graph cannot replay a generator state: refused before anything runs.
    Case("run --graph {replayed}/rewritten.ir --cuda-graph --steps 1", 2,
         "--cuda-graph: the step recomputes the random node %transformer.h.1.attn.attn_dropout_mask.recompute "
         "(dropout_mask) by replaying"),
    # A saved plan (optimize --plan) is refused naming what differs for
    # another batch, model or graph; a plan that lies about its activations is
    # refused naming the field.
    Case("optimize --plan {bert8_plan}/plan.json --model bert-tiny --batch 4 --steps 1 --out {out}/c", 2,
         "it was made for batch 8, not 4"),
    Case("optimize --plan {bert8_plan}/plan.json --model mlp --batch 8 --steps 1 --out {out}/c", 2,
         "it was made for model 'bert-tiny', not 'mlp'"),
    Case("optimize --plan {bert8_plan}/plan.json --model bert-tiny --batch 8 --optimizer adam --steps 1 --out {out}/c", 2,
         "it was made for another graph of bert-tiny (fingerprint "),
    Case("optimize --plan {bert8_plan}/plan.json --model bert-tiny --batch 8 --optimizer adam --steps 2 --out {out}/c", 2,
         "another optimizer, sequence length, image size or mutwo version?"),
    Case("optimize --plan {bert8_plan}/plan.json --budget 50% --model bert-tiny --batch 8 --out {out}/c", 2,
         "--budget excludes --plan"),
    Case("optimize --model bert-tiny --batch 2 --out {out}/c", 2, "--budget is required"),
    Case("optimize --plan {plans}/mask.json --model bert-tiny --batch 8 --steps 1 --quiet --out {out}/c", 2,
         "but its drops replay"),
    Case("optimize --plan {plans}/count.json --model bert-tiny --batch 8 --steps 1 --quiet --out {out}/c", 2,
         "field 'dropped' is"),
    Case("optimize --plan {plans}/version.json --model bert-tiny --batch 8 --steps 1 --quiet --out {out}/c", 2,
         "version 1 is not supported"),
    Case("optimize --plan {plans}/renamed.json --model bert-tiny --batch 8 --steps 1 --quiet --out {out}/c", 2,
         "the plan has %zzz"),
    Case("optimize --plan {plans}/budget.json --model bert-tiny --batch 8 --steps 1 --quiet --out {out}/c", 2,
         "'budget_bytes' must not be negative"),
    # Swapping: a plan swapping what the step lacks is refused naming it.
    Case("optimize --plan {swaps}/bad.json --model bert-tiny --batch 16 --steps 1 --quiet --out {out}/c", 2,
         "it swaps %zzz"),
    Case("plan --profile {bert16_profile}/profile.json --budget 60% --host-memory lots --out {out}/c/plan.json", 2,
         "--host-memory: 'lots' is not a size"),
    # Files mutwo reads are bounded and regular: a character device is refused,
    # as --data, as a step's tensor file; an argument ATen's kernel divides by
    # without checking (the fuzzer's SIGFPE) is refused when the step loads; a
    # tensor whose offsets hold more bytes than its shape.
    Case("run --model transformer-lm --data /dev/zero --steps 1", 2, "--data: /dev/zero is not a regular file"),
    Case("run --graph {steps}/dev_zero/step.json --steps 1", 2, "the tensor file /dev/zero is not a regular file"),
    Case("run --graph {steps}/groups.json --steps 1", 2, "groups (argument 9) must be a positive integer, got 0"),
    Case("run --graph {steps}/long/step.json --steps 1", 2, "bytes for"),
    # Never a crash: a number no double holds (1e400, -1e400), NaN or Infinity in any
    # JSON input is exit 2 naming the field; an IR node without an attribute
    # its op needs, or with one of another kind, is exit 2 naming the node, op
    # and attribute.
    Case("plan --profile {numbers}/profile_big.json --budget 100% --out {out}/plan.json", 2,
         "field 'step_ms' is 1e400, beyond the range of a double"),
    Case("plan --profile {numbers}/profile_small.json --budget 100% --out {out}/plan.json", 2,
         "field 'step_ms' is -1e400"),
    Case("plan --profile {numbers}/profile_nan.json --budget 100% --out {out}/plan.json", 2, "field 'step_ms' is NaN"),
    Case("plan --profile {numbers}/profile_inf.json --budget 100% --out {out}/plan.json", 2,
         "field 'step_ms' is -Infinity"),
    Case("plan --profile {numbers}/profile_node.json --budget 100% --out {out}/plan.json", 2,
         "field 'nodes[0].ms' is Infinity"),
    Case("optimize --plan {numbers}/plan_big.json --model transformer-lm --batch 2 --steps 1 --out {out}/opt", 2,
         "plan_big.json: field 'budget_bytes' is 1e400"),
    Case("run --graph {numbers}/step.json --steps 1", 2, "step.json: field 'version' is -1e400"),
    Case("run --graph {numbers}/step_shape.json --steps 1", 2,
         "value 't_2': field 'shape': a tensor of shape [9223372036854775807,2] has more than 2^50 elements"),
    Case("run --graph {numbers}/no_dim.ir --steps 1", 2, "op log_softmax needs the attribute 'dim' (an integer)"),
    Case("run --graph {numbers}/p_string.ir --steps 1", 2, "op dropout_mask: attribute 'p' must be a number, got a string"),
    Case("run --graph {numbers}/dim_huge.ir --steps 1", 2, "integer out of range"),
    # One budget language (docs/budgets.md), checked when parsed: a bad size,
    # a bare number below 1 MiB, a bad planner or flag is refused before
    # anything is profiled, not after minutes of work.
    Case("optimize --model mlp --batch 8 --budget abc --steps 1 --out {out}/o", 2, "--budget: 'abc' is not a budget; write a size",
         before_work=True),
    Case("optimize --model mlp --batch 8 --budget -5GiB --steps 1 --out {out}/o", 2,
         "--budget: '-5GiB' is not a budget", before_work=True),
    Case("optimize --model mlp --batch 8 --budget 60 --steps 1 --out {out}/o", 2,
         "--budget: '60' is a bare number, which reads as bytes, and below 1 MiB; write 60% or 60MiB", before_work=True),
    Case("optimize --model mlp --batch 8 --budget 0.6 --steps 1 --out {out}/o", 2, "write 60% or 0.6MiB",
         before_work=True),
    Case("optimize --model mlp --batch 8 --budget 0% --steps 1 --out {out}/o", 2, "'0%' is not a percentage",
         before_work=True),
    Case("optimize --model mlp --batch 8 --budget 60% --planner greedy --steps 1 --out {out}/o", 2,
         "--planner: unknown planner 'greedy'; planners: none, per-layer, sqrt-n, mutwo, optimal", before_work=True),
    Case("optimize --model mlp --batch 8 --budget 60% --host-memory lots --steps 1 --out {out}/o", 2,
         "--host-memory: 'lots' is not a size", before_work=True),
    Case("optimize --model mlp --batch 8 --budget 60% --device-memory lots --steps 1 --out {out}/o", 2,
         "--device-memory: 'lots' is not a size", before_work=True),
    Case("plan --profile {mlp_report}/profile.json --budget 60 --out {out}/plan.json", 2, "write 60% or 60MiB",
         before_work=True),
    Case("plan --profile {mlp_report}/profile.json --out {out}/plan.json", 2, "--budget is required",
         before_work=True),
    Case("sweep --model mlp --batches 8 --budget abc --steps 1 --out {out}/s", 2, "--budget: 'abc' is not a budget; write a size",
         before_work=True),
    Case("sweep --model mlp --batches 8 --planner greedy --steps 1 --out {out}/s", 2, "unknown planner 'greedy'",
         before_work=True),
    Case("train --model transformer-lm --data {text} --batch 8 --budget 60", 2, "write 60% or 60MiB",
         before_work=True),
    Case("max-batch --model mlp --memory 10MiB --planners none,nope --limit 4 --out {out}/m", 2,
         "unknown planner 'nope'", before_work=True),
    Case("max-batch --model mlp --memory abc --limit 4 --out {out}/m", 2, "--memory: 'abc' is not a size",
         before_work=True),
    Case("optimize --model mlp --batch 8 --bucket-size 2XB --budget 60% --steps 1 --out {out}/o", 2,
         "--bucket-size: unknown unit 'xb'", before_work=True),
    # A misspelled flag names the nearest one and the command's --help.
    Case("optimize --model mlp --batch 8 --budgt 60% --steps 1 --out {out}/o", 2,
         "mutwo optimize has no option --budgt: did you mean --budget?; see mutwo optimize --help", before_work=True),
    Case("run --model mlp --stpes 1", 2, "mutwo run has no option --stpes: did you mean --steps?; see mutwo run --help",
         before_work=True),
    Case("profile --model mlp --zzzzzzzz --out {out}/p", 2, "mutwo profile has no option --zzzzzzzz; see mutwo profile --help",
         before_work=True),
    Case("run --batch abc --steps 1", 2, "see mutwo run --help", before_work=True),
]
