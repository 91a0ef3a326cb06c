"""The layout-rule catalog as data: one entry per rule the real stack enforces (sections A–H, by where it
runs: A process-group grid, B model-parallel config, C Megatron's argument validation, D hybrid/Mamba
stack, E MoE at run time, F MTP head, G SGLang engine, H miles) plus our own section M.

Ids are stable, so an operator, a test or the deep oracle can look a finding up by id. Section M (M1–M3)
is ours: the memory estimates of `backend.plan.sizing` turned into checks.
Each entry says whether `backend.plan.checks` decides it from the spec:

* ``checked`` – a check runs on every spec (its findings carry this id);
* ``covered`` – same condition as another rule that is checked (named in ``note``), so it never fires twice;
* ``n/a`` – nothing in the RunSpec can make it fire (a flag the recipe never passes, a runtime-only
  condition); ``note`` says why.

``severities`` lists what a rule can emit; ``severity`` is the worst of them. Silent corrections made by the
real stack (SP dropped at TP=1, colocate overriding rollout GPUs, ETP defaults) are warnings, not hidden.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from backend.severity import Severity

Status = Literal["checked", "covered", "n/a"]


# Field groups reused by many rules (dotted RunSpec paths, as the UI highlights them).
CLUSTER = ("cluster.nodes", "cluster.gpus_per_node")
ROLLOUT_POOL = ("rollout.num_gpus", "rollout.colocate", *CLUSTER)


@dataclass(frozen=True, slots=True)
class LayoutRule:
    """One catalog row: what it checks, where the real stack enforces it, and which spec fields it touches."""

    id: str
    title: str
    severities: tuple[Severity, ...]
    fields: tuple[str, ...]
    source: str
    status: Status = "checked"
    note: str = ""

    @property
    def section(self) -> str:
        return self.id[0]

    @property
    def severity(self) -> Severity:
        return min(self.severities, key=lambda s: s.rank)

    def to_json(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "section": self.section,
            "title": self.title,
            "severity": self.severity,
            "severities": list(self.severities),
            "fields": list(self.fields),
            "source": self.source,
            "status": self.status,
            "note": self.note,
        }


ERR = (Severity.ERROR,)
WARN = (Severity.WARNING,)
INFO = (Severity.INFO,)
ERR_WARN = (Severity.ERROR, Severity.WARNING)

_CATALOG: tuple[LayoutRule, ...] = (
    # ---------------------------------------------------------------- A: Megatron process-group grid
    LayoutRule(
        "A1",
        "dense grid TP·PP·CP divides the world",
        ERR,
        ("train.tp", "train.pp", "train.cp", *CLUSTER),
        "mcore-0.19.2 parallel_state.py:822-823; MLM-fork parallel_state.py:744",
    ),
    LayoutRule(
        "A2",
        "expert grid ETP·EP·PP divides the world",
        ERR,
        ("train.etp", "train.ep", "train.pp", "train.tp", *CLUSTER),
        "mcore-0.19.2 parallel_state.py:875-884; MLM-fork :797",
    ),
    LayoutRule(
        "A3",
        "unset ETP defaults to TP in Megatron (1 in Bridge)",
        WARN,
        ("train.etp", "train.tp", "train.ep"),
        (
            "mcore-0.19.2 parallel_state.py:871-872, "
            "model_parallel_config.py:506-507; MB-0.6.2 transformer_config.py:80-88"
        ),
    ),
    LayoutRule(
        "A4",
        "pp-last rank order lets EDP differ from DP",
        ERR,
        ("train.pp",),
        "mcore-0.19.2 parallel_state.py:898-907",
        "n/a",
        "the order string is not settable; miles uses the default tp-cp-ep-dp-pp, which ends in pp",
    ),
    LayoutRule(
        "A5",
        "EP and CP never in one rank generator",
        ERR,
        ("train.ep", "train.cp"),
        "mcore-0.19.2 parallel_state.py:479-483",
        "n/a",
        "Megatron builds the dense grid with ep=1 and the expert grid with cp=1, so no spec reaches it",
    ),
    LayoutRule(
        "A6",
        "rank order names every size != 1",
        ERR,
        (),
        "mcore-0.19.2 parallel_state.py:505-509",
        "n/a",
        "the order string is not settable",
    ),
    LayoutRule(
        "A7",
        "rank layout (TP fastest, PP slowest)",
        INFO,
        ("train.tp", "train.pp", "train.ep"),
        "mcore-0.19.2 parallel_state.py:617 RankGenerator",
        "n/a",
        "descriptive, not a check: layout_figures() reports the resulting group spans",
    ),
    LayoutRule(
        "A8",
        "virtual pipeline needs PP > 1",
        ERR,
        ("train.vpp", "train.pp"),
        "mcore-0.19.2 parallel_state.py:827-831; MLM-fork :751",
    ),
    LayoutRule(
        "A9",
        "distributed-optimizer instances divide DP/EDP",
        ERR,
        (),
        "mcore-0.19.2 parallel_state.py:922-926",
        "n/a",
        "num_distributed_optimizer_instances is not settable (default 1 divides everything)",
    ),
    # ------------------------------------------------------------- B: ModelParallelConfig / TransformerConfig
    LayoutRule(
        "B1",
        "attention heads split by TP",
        ERR,
        ("train.tp", "model.num_attention_heads"),
        "mcore-0.19.2 transformer_config.py:1323-1327; MLM-fork :1013",
    ),
    LayoutRule(
        "B2",
        "GQA query groups divide or are divided by TP",
        ERR,
        ("train.tp", "model.num_query_groups"),
        "mcore-0.19.2 transformer_config.py:1338-1345; MLM-fork :1029-1034",
    ),
    LayoutRule(
        "B3",
        "sequence parallel requires TP > 1 (core)",
        ERR,
        ("train.sequence_parallel", "train.tp"),
        "mcore-0.19.2 model_parallel_config.py:502-504",
        "covered",
        "validate_args turns SP off at TP=1 before the core config sees it: reported as C5 (warning)",
    ),
    LayoutRule(
        "B4",
        "MoE + EP + TP without SP (config-time warning)",
        WARN,
        ("train.sequence_parallel", "train.tp", "train.ep"),
        "mcore-0.19.2 model_parallel_config.py:560-565; MLM-fork :452",
    ),
    LayoutRule(
        "B5",
        "PP needs pipeline_dtype",
        ERR,
        ("train.pp",),
        "mcore-0.19.2 model_parallel_config.py:527-531",
        "n/a",
        "Bridge fills pipeline_dtype from params_dtype (MB-0.6.2 transformer_config.py:177-178)",
    ),
    LayoutRule(
        "B6",
        "EP needs experts",
        ERR,
        ("train.ep", "model.num_experts"),
        "mcore-0.19.2 transformer_config.py:1468",
        "n/a",
        "model.num_experts is required (> 0) by the spec schema",
    ),
    LayoutRule(
        "B7",
        "uneven first/last pipeline stages add up (checked at any PP)",
        ERR,
        (
            "train.decoder_first_pipeline_num_layers",
            "train.decoder_last_pipeline_num_layers",
            "train.pp",
            "model.num_layers",
        ),
        "mcore-0.19.2 transformer_config.py:1989-2062; MLM-fork :1472-1519",
    ),
    LayoutRule(
        "B8",
        "account-for-embedding/loss split",
        ERR,
        (),
        "mcore-0.19.2 transformer_config.py:1923-1933",
        "n/a",
        "--account-for-embedding/loss-in-pipeline-split is never passed",
    ),
    LayoutRule(
        "B9",
        "explicit pipeline layout",
        ERR,
        (),
        "mcore-0.19.2 transformer_config.py:1936-1987",
        "n/a",
        "--pipeline-model-parallel-layout is never passed",
    ),
    LayoutRule(
        "B10",
        "shared-expert overlap needs the alltoall dispatcher (fork); allgather is switched",
        ERR_WARN,
        ("train.moe_shared_expert_overlap", "train.moe_token_dispatcher"),
        (
            "mcore-0.19.2 transformer_config.py:1644-1650; MLM-fork "
            ":1197 (alltoall only); miles arguments.py:2715-2726"
        ),
    ),
    LayoutRule(
        "B11",
        "latent MoE forces shared-expert overlap off",
        WARN,
        ("train.moe_shared_expert_overlap", "model.moe_latent_size"),
        "MLM-fork moe/moe_layer.py:278-281; miles miles_plugins/megatron_bridge/nemotron_h.py:123-126",
    ),
    LayoutRule(
        "B12",
        "MoE bias needs ETP == 1",
        ERR,
        ("model.add_bias_linear", "train.etp", "train.tp"),
        "mcore-0.19.2 transformer_config.py:2279-2282",
    ),
    LayoutRule(
        "B13",
        "group-limited routing groups",
        ERR,
        ("model.n_group", "model.topk_group", "model.num_experts"),
        "mcore-0.19.2 transformer_config.py:2338-2356",
    ),
    LayoutRule(
        "B14",
        "recompute settings",
        ERR,
        ("train.recompute_granularity", "train.recompute_method", "train.recompute_num_layers"),
        (
            "mcore-0.19.2 transformer_config.py:1724-1761; "
            "megatron/training/arguments.py (selective ⇒ no method)"
        ),
    ),
    LayoutRule(
        "B15",
        "CPU activation offloading",
        ERR,
        (),
        "mcore-0.19.2 transformer_config.py:1707-1722",
        "n/a",
        "--cpu-offloading is never passed (miles offloads the optimizer, not activations)",
    ),
    LayoutRule(
        "B16",
        "MTP + EP A2A overlap",
        ERR,
        (),
        "mcore-0.19.2 transformer_config.py:2700-2713",
        "n/a",
        "--overlap-moe-expert-parallel-comm is never passed",
    ),
    # ---------------------------------------------------------------- C: megatron.training validate_args
    LayoutRule(
        "C1",
        "world divisible by TP·PP·CP (validate_args)",
        ERR,
        ("train.tp", "train.pp", "train.cp", *CLUSTER),
        "mcore-0.19.2 megatron/training/arguments.py:429-432",
        "covered",
        "same condition as A1",
    ),
    LayoutRule(
        "C2",
        "even pipeline split: layers % PP",
        ERR,
        ("train.pp", "model.num_layers"),
        "mcore-0.19.2 arguments.py:950-964; MLM-fork :620-636",
    ),
    LayoutRule(
        "C3",
        "interleaved schedule needs PP > 1 (PP > 2 without p2p overlap)",
        ERR,
        ("train.vpp", "train.pp", "run.extra_args"),
        "mcore-0.19.2 arguments.py:966-975 (the console passes --num-virtual-stages-per-pipeline-rank, so "
        "the layers-per-virtual-stage check of :921-945 does not apply; a value of 1 means no interleaving)",
    ),
    LayoutRule(
        "C4",
        "experts divisible by EP",
        ERR,
        ("train.ep", "model.num_experts"),
        "mcore-0.19.2 arguments.py:1600-1603; MLM-fork :1089-1092; runtime moe_layer.py:185",
    ),
    LayoutRule(
        "C5",
        "sequence parallel silently off at TP=1",
        WARN,
        ("train.sequence_parallel", "train.tp"),
        "mcore-0.19.2 arguments.py:1390-1402; MLM-fork :968-980; MB-0.6.2 transformer_config.py:179-180",
    ),
    LayoutRule(
        "C6",
        "latent size positive",
        ERR,
        ("model.moe_latent_size",),
        "mcore-0.19.2 arguments.py:1899-1900",
        "n/a",
        "the spec schema requires moe_latent_size > 0 when set",
    ),
    LayoutRule(
        "C7",
        "eval batch divisibility",
        ERR,
        ("batch.global_batch_size", "train.micro_batch_size"),
        "mcore-0.19.2 arguments.py:690-696",
        "covered",
        "eval_global_batch_size/eval_micro_batch_size default to the training values: same numbers as C8",
    ),
    LayoutRule(
        "C8",
        "global batch divisible by micro batch × DP",
        ERR,
        ("batch.global_batch_size", "train.micro_batch_size", "train.tp", "train.pp", "train.cp", *CLUSTER),
        "mcore-0.19.2 num_microbatches_calculator.py:381-386; miles megatron_utils/initialize.py:105-112",
    ),
    LayoutRule(
        "C9",
        "hybrid pattern arguments",
        ERR,
        (),
        "mcore-0.19.2 arguments.py:761-836",
        "n/a",
        "miles passes --num-layers, never --hybrid-layer-pattern",
    ),
    LayoutRule(
        "C10",
        "MTP needs rope/none position embedding",
        ERR,
        ("model.position_embedding_type", "run.extra_env"),
        "mcore-0.19.2 arguments.py:838-890",
    ),
    LayoutRule(
        "C11",
        "TP/CP > 1 needs CUDA_DEVICE_MAX_CONNECTIONS=1",
        ERR,
        ("run.extra_env", "train.tp", "train.cp"),
        "mcore-0.19.2 arguments.py:1413-1439; miles command_utils.py:201 sets it",
    ),
    LayoutRule(
        "C12",
        "validate_args does not check the expert grid",
        INFO,
        (),
        "(absence)",
        "covered",
        "documents why A2/A3 are needed; A2 is checked",
    ),
    # ---------------------------------------------------------------- D: hybrid / Mamba
    LayoutRule(
        "D1",
        "Mamba heads split by TP",
        ERR,
        ("train.tp", "model.mamba_num_heads"),
        "mcore-0.19.2 ssm/mamba_mixer.py:260; MLM-fork :250",
    ),
    LayoutRule(
        "D2",
        "Mamba groups split by TP",
        ERR,
        ("train.tp", "model.mamba_num_groups"),
        "mcore-0.19.2 ssm/mamba_mixer.py:268; MLM-fork :258",
    ),
    LayoutRule(
        "D3",
        "Mamba heads per group integral",
        ERR,
        ("model.mamba_num_heads", "model.mamba_num_groups"),
        "mcore-0.19.2 ssm/mamba_mixer.py:239-249, 272",
    ),
    LayoutRule(
        "D4",
        "FP8 Mamba in_proj width % 16",
        ERR,
        (),
        "mcore-0.19.2 ssm/mamba_mixer.py:252",
        "n/a",
        "the recipe trains in BF16 (no --fp8 flag in the spec)",
    ),
    LayoutRule(
        "D5",
        "hybrid pattern length equals num_layers",
        ERR,
        ("model.hybrid_pattern", "model.num_layers"),
        "MLM-fork ssm/mamba_hybrid_layer_allocation.py:193-204, 216-240",
    ),
    LayoutRule(
        "D6",
        "pattern length (0.19.2 / Bridge)",
        ERR,
        ("model.hybrid_pattern", "model.num_layers"),
        "MB-0.6.2 models/hybrid/hybrid_provider.py:233-249",
        "covered",
        "same condition as D5",
    ),
    LayoutRule(
        "D7",
        "hybrid PP split in miles' Megatron fork: no VPP, floor split, first/last ignored",
        ERR_WARN,
        (
            "train.vpp",
            "train.decoder_first_pipeline_num_layers",
            "train.decoder_last_pipeline_num_layers",
            "train.pp",
            "model.num_layers",
        ),
        "MLM-fork ssm/mamba_block.py:121-131, 188-199",
    ),
    LayoutRule(
        "D8",
        "hybrid PP split (0.19.2 select_pipeline_segment)",
        ERR,
        ("train.pp", "train.vpp"),
        "mcore-0.19.2 models/hybrid/hybrid_layer_allocation.py:377-475",
        "covered",
        "miles runs the fork: C2 (layers % PP) and D7 (VPP, first/last) give the same verdicts",
    ),
    LayoutRule(
        "D9",
        "Bridge hybrid: no VPP",
        ERR,
        ("train.vpp",),
        "MB-0.6.2 models/hybrid/hybrid_provider.py:295-298",
        "covered",
        "same condition as D7 (VPP set)",
    ),
    LayoutRule(
        "D10",
        "layer symbols valid (MTP pattern)",
        ERR,
        ("model.mtp_pattern", "model.mtp_num_layers"),
        (
            "mcore-0.19.2 hybrid_layer_allocation.py:200-327 "
            "(main pattern symbols are enforced by the spec schema)"
        ),
    ),
    LayoutRule(
        "D11",
        "Bridge mamba chunk >= 1",
        ERR,
        (),
        "MB-0.6.2 hybrid_provider.py:176-177",
        "n/a",
        "mamba_chunk_size comes from the HF config, not the spec",
    ),
    # ---------------------------------------------------------------- E: MoE runtime
    LayoutRule(
        "E1",
        "local experts integral",
        ERR,
        ("train.ep", "model.num_experts"),
        "mcore-0.19.2 moe/moe_layer.py:185",
        "covered",
        "same condition as C4 (validate_args catches it first)",
    ),
    LayoutRule(
        "E2",
        "MoE + TP training needs sequence parallel",
        ERR,
        ("train.sequence_parallel", "train.tp"),
        "mcore-0.19.2 moe/moe_layer.py:630-633; MLM-fork :396-397",
    ),
    LayoutRule(
        "E3",
        "latent projections need Transformer Engine",
        ERR,
        (),
        "mcore-0.19.2 moe/moe_layer.py:265-296",
        "n/a",
        "a property of the training image, not of the spec",
    ),
    LayoutRule(
        "E4",
        "tensor-parallel linear shards divide",
        ERR,
        (
            "train.tp",
            "train.etp",
            "model.shared_expert_intermediate_size",
            "model.moe_ffn_hidden_size",
            "model.ffn_hidden_size",
            "model.num_attention_heads",
            "model.num_query_groups",
            "model.kv_channels",
        ),
        "megatron/core/tensor_parallel/layers.py (divide)",
    ),
    LayoutRule(
        "E5",
        "SP token padding",
        ERR,
        (),
        "miles training_utils/data.py:83,171",
        "n/a",
        "miles pads packed sequences to a multiple of TP itself",
    ),
    # ---------------------------------------------------------------- F: MTP with PP
    LayoutRule(
        "F1",
        "MTP block lives on the last pipeline stage",
        INFO,
        ("run.extra_env", "train.pp"),
        "mcore-0.19.2 transformer/multi_token_prediction.py:651-658, 693-712",
    ),
    LayoutRule(
        "F2",
        "MTP layers need an MTP pattern",
        ERR,
        ("model.mtp_num_layers", "model.mtp_pattern"),
        "MB-0.6.2 models/nemotronh/nemotron_h_bridge.py:253-262",
    ),
    LayoutRule(
        "F3",
        "MTP head only built with MILES_NEMOTRONH_KEEP_MTP",
        (Severity.ERROR, Severity.INFO),
        ("run.extra_env", "run.extra_args", "model.mtp_num_layers"),
        "miles miles_plugins/megatron_bridge/nemotron_h.py:133-137; miles arguments.py:3470",
    ),
    # ---------------------------------------------------------------- G: SGLang rollout engine
    LayoutRule(
        "G1",
        "DP-attention dp divides the engine TP",
        ERR,
        ("rollout.dp", "rollout.gpus_per_engine"),
        "SGL-0.5.16 server_args.py:5607; SGL-0.5.23 arg_groups/parallel_hook.py:326",
    ),
    LayoutRule(
        "G2",
        "attention DP bounds",
        ERR,
        ("rollout.dp",),
        "SGL-0.5.23 parallel_hook.py:285-292",
        "n/a",
        "miles passes dp with dp-attention, so replica dp stays 1; dp >= 1 is schema-enforced",
    ),
    LayoutRule(
        "G3",
        "multi-node DP needs DP-attention",
        ERR,
        ("rollout.dp", "rollout.enable_dp_attention"),
        "SGL-0.5.16 server_args.py:7601-7603",
        "covered",
        "H2 (miles) demands dp-attention for every dp > 1, single- or multi-node",
    ),
    LayoutRule(
        "G4",
        "engine TP divisible by its node count",
        ERR,
        ("rollout.gpus_per_engine", "cluster.gpus_per_node"),
        "SGL-0.5.16 server_args.py:7576-7579; SGL-0.5.23 validation_hook.py:179-181",
    ),
    LayoutRule(
        "G5",
        "moe_dense_tp_size",
        ERR,
        (),
        "SGL-0.5.16 server_args.py:7608-7612",
        "n/a",
        "--sglang-moe-dense-tp-size is never passed",
    ),
    LayoutRule(
        "G6",
        "NemotronH BF16 on Hopper: rollout EP is 1 or the engine TP",
        ERR,
        ("rollout.ep", "rollout.gpus_per_engine"),
        (
            "SGL-0.5.23 arg_groups/model_overrides/nemotron_h.py:99-121 "
            "+ moe_hook.py:80-92; SGL-0.5.16 server_args.py:5656-5666"
        ),
    ),
    LayoutRule(
        "G7",
        "Nemotron-H: no triton attention backend",
        ERR,
        ("rollout.sglang_attention_backend",),
        "SGL-0.5.16 server_args.py:4746-4753; SGL-0.5.23 parallel_hook.py:76-77",
    ),
    LayoutRule(
        "G8",
        "CP / moe_dp relations",
        ERR,
        (),
        "SGL-0.5.16 server_args.py:5553-5588",
        "n/a",
        "attn_cp and moe_dp are never passed (both 1)",
    ),
    LayoutRule(
        "G9",
        "Mamba mixer under attention TP",
        ERR,
        ("rollout.gpus_per_engine", "rollout.dp", "model.mamba_num_heads", "model.mamba_num_groups"),
        "SGL-0.5.16 layers/attention/mamba/mamba.py:231-252; SGL-0.5.23 :233-251",
    ),
    LayoutRule(
        "G10",
        "NemotronH attention under attention TP",
        ERR,
        ("rollout.gpus_per_engine", "rollout.dp", "model.num_attention_heads", "model.num_query_groups"),
        "SGL-0.5.16 models/nemotron_h.py:615-625; SGL-0.5.23 :696-706",
    ),
    LayoutRule(
        "G11",
        "fused MoE sharding in the engine",
        ERR,
        ("rollout.ep", "rollout.gpus_per_engine", "model.num_experts", "model.moe_ffn_hidden_size"),
        "SGL-0.5.16 layers/moe/fused_moe_triton/layer.py:249,256; SGL-0.5.23 :414,427",
    ),
    LayoutRule(
        "G12",
        "engine world = TP·PP on whole nodes",
        ERR_WARN,
        ("rollout.gpus_per_engine", "cluster.gpus_per_node"),
        "SGL-0.5.16 distributed/parallel_state.py:2180-2185; miles ray/rollout/server_group.py:49-56",
    ),
    # ---------------------------------------------------------------- H: miles
    LayoutRule(
        "H1",
        "SGLang TP = GPUs per engine",
        INFO,
        ("rollout.gpus_per_engine",),
        "miles backends/sglang_utils/arguments.py:184",
        "n/a",
        "an identity, reported by layout_figures()",
    ),
    LayoutRule(
        "H2",
        "sglang dp > 1 needs dp-attention",
        ERR,
        ("rollout.dp", "rollout.enable_dp_attention"),
        "miles backends/sglang_utils/arguments.py:193-194",
    ),
    LayoutRule(
        "H3",
        "colocate forces the rollout GPU count",
        ERR_WARN,
        ROLLOUT_POOL,
        "miles utils/arguments.py:3296-3317; ray/placement_group.py:92-105",
    ),
    LayoutRule(
        "H4",
        "engines per rollout pool (floor division)",
        ERR_WARN,
        ("rollout.gpus_per_engine", *ROLLOUT_POOL),
        "miles ray/rollout/rollout_server.py:47-49; ray/rollout/server_group.py:51,72",
    ),
    LayoutRule(
        "H5",
        "sglang-config GPU total",
        ERR,
        (),
        "miles ray/rollout/rollout_server.py:142-146",
        "n/a",
        "--sglang-config is never passed",
    ),
    LayoutRule(
        "H6",
        "global batch vs samples per rollout",
        ERR_WARN,
        (
            "batch.global_batch_size",
            "batch.rollout_batch_size",
            "batch.n_samples_per_prompt",
            "batch.num_steps_per_rollout",
        ),
        "miles utils/arguments.py:3431-3439; ray/rollout/rollout_data_conversion.py:42-48",
    ),
    LayoutRule(
        "H7",
        "over-sampling batch >= rollout batch",
        ERR,
        ("batch.over_sampling_batch_size", "batch.rollout_batch_size"),
        "miles utils/arguments.py:3450-3453",
    ),
    LayoutRule(
        "H8",
        "dynamic batch needs max_tokens_per_gpu",
        ERR,
        ("train.use_dynamic_batch_size", "batch.max_tokens_per_gpu"),
        "miles utils/arguments.py:3155-3158",
    ),
    LayoutRule(
        "H9",
        "local batch per DP rank",
        ERR,
        ("batch.global_batch_size", "train.micro_batch_size"),
        "miles backends/training_utils/data.py:455-487; utils/dp_schedule.py:124-132",
        "covered",
        "with C8 satisfied every DP rank gets GBS/DP samples and the micro-batch count divides",
    ),
    LayoutRule(
        "H10",
        "first/last stage sizes only with PP > 1",
        ERR,
        ("train.decoder_first_pipeline_num_layers", "train.decoder_last_pipeline_num_layers", "train.pp"),
        "miles utils/arguments.py:2722-2726",
    ),
    LayoutRule(
        "H11",
        "HF config vs Megatron args",
        ERR,
        ("model.name",),
        "miles utils/arguments.py:3656-3707",
        "n/a",
        (
            "the spec is the one source of both; the shim "
            "preflight compares it with the checkpoint's config.json"
        ),
    ),
    LayoutRule(
        "H12",
        "launcher layout table (run_nemotron_3_ultra_550b_a55b.py)",
        INFO,
        (
            "train.tp",
            "train.pp",
            "train.ep",
            "train.etp",
            "rollout.gpus_per_engine",
            "rollout.dp",
            "rollout.ep",
            "rollout.mem_fraction",
            *CLUSTER,
        ),
        "miles scripts/run_nemotron_3_ultra_550b_a55b.py:113-143, 211-212",
    ),
    LayoutRule(
        "H13",
        "run.extra_args: only flags and values miles' parser knows",
        ERR,
        ("run.extra_args",),
        "miles utils/arguments.py:2664 parse_args (allow_abbrev=False); configs/miles/args.toml",
    ),
    LayoutRule(
        "H14",
        "run.extra_args repeats a flag the plan sets (the last one wins)",
        WARN,
        ("run.extra_args",),
        "argparse: a repeated option keeps its last value; the extra args come last in the argv",
    ),
    LayoutRule(
        "H15",
        "micro batch size is ignored under dynamic batch size (miles uses 1)",
        WARN,
        ("train.micro_batch_size", "train.use_dynamic_batch_size"),
        "miles utils/arguments.py:1107 (reset to 1, 'ignored if use_dynamic_batch_size is set')",
    ),
    # ---------------------------------------------------------------- M: ours — memory (backend.plan.sizing)
    LayoutRule(
        "M1",
        "training weights + fp32 grads (+ optimizer if not offloaded) fit in HBM",
        ERR_WARN,
        ("cluster.gpu_memory_gb", "train.tp", "train.pp", "train.ep", "train.etp", "optimizer.cpu_offload"),
        "ultra-console's own estimate (backend.plan.sizing)",
    ),
    LayoutRule(
        "M2",
        "offloaded Adam state + host grad copies fit in host RAM per node",
        ERR_WARN,
        (
            "cluster.host_memory_gb",
            "cluster.gpus_per_node",
            "train.tp",
            "train.pp",
            "train.ep",
            "train.etp",
            "optimizer.cpu_offload",
        ),
        "ultra-console's own estimate (backend.plan.sizing)",
    ),
    LayoutRule(
        "M3",
        "rollout weights per GPU fit in mem_fraction × HBM",
        ERR_WARN,
        (
            "rollout.gpus_per_engine",
            "rollout.ep",
            "rollout.dp",
            "rollout.mem_fraction",
            "cluster.gpu_memory_gb",
        ),
        "ultra-console's own estimate (backend.plan.sizing), not verified against SGLang's sharding",
    ),
)

RULES: dict[str, LayoutRule] = {rule.id: rule for rule in _CATALOG}
"""Every catalog rule by id, in catalog order (A–H, then M)."""

CHECKED: tuple[str, ...] = tuple(r.id for r in _CATALOG if r.status == "checked")
ORDER: dict[str, int] = {rule_id: i for i, rule_id in enumerate(RULES)}
