"""A whole rank's refits, replayed: the rank load (``replay.replay_load``'s), then N refits of
every layer in a row on the same allocator model; the refit is an axis of the replay.

Legend: L MoE layers; a refit is every layer's ``refit.REFITS[way]`` in turn, layer by layer,
each replayed from its trace on ``meta`` at full size (``replay.refit_trace``), its outputs
replacing the layer's blocks they do not live in (``replay.replay_step``).

What is assumed (docs/allocator.md, "Refits, replayed"): the refits run under the load's
allocator settings (by default vLLM's sleep-mode pool and ``max_split_size_mb:20``: the pool
that holds the weights keeps every segment it ever made, and the first failed raw allocation
is the OOM); nothing else allocates in between (activations, KV cache, NCCL buffers and CUDA
graphs are outside ``device_bytes``); the model's other weights are one allocation, first.

Two out-of-memory reports are replayed from their own facts (``REPORTS``): PyTorch's OOM message
counts as "allocated in private pools" the *free* blocks of private pools (the sleep-mode
pool's), so ``device_bytes`` is the reserved bytes at the OOM plus what the device still had
free, and the private-pool figure is the stranded memory the replay predicts.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass

from ..formats.catalog import layer_shape
from ..formats.layer import Layer
from ..formats.shape import LayerShape
from ..formats.table import strategy_input
from .allocator import Allocator, Block, MiB, OutOfMemory, Pool
from .replay import LayerTrace, refit_trace, replay_rank, replay_step, trace_call
from .wholemodel import DEVICE_EVENTS, VLLM_LOAD_MAX_SPLIT_MB, RankLoad

__all__ = [
    "REPORTS",
    "OomReport",
    "RefitReplay",
    "RefitRound",
    "align_trace",
    "replay_refits",
    "replay_report",
]

GiB = 2**30


@dataclass(frozen=True)
class RefitRound:
    """One refit of every layer (``refit`` counts from 1; the first load is ``RankLoad``'s):
    the driver calls it made (``torch.cuda.memory_stats()``'s names, and the refused
    ``cudaMalloc`` calls) and the memory after it, or at its OOM."""

    refit: int
    num_device_alloc: int
    num_device_free: int
    num_device_alloc_failed: int
    num_alloc_retries: int
    reserved_bytes: int
    allocated_bytes: int
    reserved_growth_bytes: int  # reserved_bytes less the reserved bytes before this refit
    oom_layer: int | None  # 0-based layer whose refit ran out of memory; None: it completed
    oom_message: str | None


@dataclass(frozen=True)
class RefitReplay:
    """The rank load and up to ``refits`` refits in a row, until the first OOM."""

    load: RankLoad  # the first load: the weights, then each layer converted
    way: str  # the refits' way, a key of refit.REFITS
    refits: int  # refits asked for; ``rounds`` has fewer after an OOM (none after the load's)
    rounds: tuple[RefitRound, ...]
    peak_reserved_bytes: int  # over the load and every refit
    final_reserved_bytes: int  # at the end, or at the OOM
    final_allocated_bytes: int

    @property
    def oom_refit(self) -> int | None:
        """0 when the first load runs out of memory, k when the k-th refit does, else None."""
        if self.load.oom:
            return 0
        return next((r.refit for r in self.rounds if r.oom_layer is not None), None)

    @property
    def margin_bytes(self) -> int | None:
        """What the device never lent at the peak (``device_bytes`` less the peak reserved
        bytes): the room left to other memory; None on an unbounded device. After an OOM, less
        than the segment that failed."""
        if self.load.device_bytes is None:
            return None
        return self.load.device_bytes - self.peak_reserved_bytes

    @property
    def unallocated_bytes(self) -> int:
        """Reserved but not allocated at the end (at the OOM): the free blocks PyTorch's OOM
        message counts "in private pools" for the sleep-mode pool."""
        return self.final_reserved_bytes - self.final_allocated_bytes


def _align_moe_weights_for_fi(layer: Layer, intermediate: int) -> Layer:
    """vLLM 0.25.1's ``align_moe_weights_for_fi`` for a layer that is not gated: w13 and w2
    copied into new zeroed tensors of ``intermediate`` rows (w13) and columns (w2). Memory:
    the padded layer, new; the caller's tensors are replaced by it."""
    experts, hidden, loaded = layer.w2.shape
    w13 = layer.w13.new_zeros((experts, intermediate, layer.w13.shape[2]))
    w13[:, :loaded] = layer.w13
    w2 = layer.w2.new_zeros((experts, hidden, intermediate))
    w2[:, :, :loaded] = layer.w2
    return Layer(w13=w13, w2=w2)


@functools.cache
def align_trace(loaded: LayerShape, intermediate: int) -> LayerTrace:
    """The trace of vLLM 0.25.1's padding of a BF16 ``loaded`` layer (not gated) to
    ``intermediate`` per rank, before its FlashInfer conversion (vLLM #52511's 1.38 GiB
    allocation; #54699 allocates the padded size before loading instead). ``ValueError`` for
    a gated or quantized layer, whose padding is not transcribed here."""
    if loaded.gated or loaded.format != "bf16":
        raise ValueError(
            f"{loaded.label}: only a BF16 layer that is not gated is padded here (vLLM #52511's); "
            "give a shape loaded at its padded size"
        )
    layer = strategy_input(loaded, "preallocated", "meta")
    call = functools.partial(_align_moe_weights_for_fi, layer, intermediate)
    return trace_call(loaded, "align_moe_weights_for_fi", call, layer)


def replay_refits(
    shape: LayerShape,
    strategy: str,
    refits: int,
    *,
    way: str = "direct",
    max_split_size_mb: int | None = VLLM_LOAD_MAX_SPLIT_MB,
    pool: Pool = "sleep",
    device_bytes: int | None,
    other_weights_bytes: int = 0,
    loaded_intermediate: int | None = None,
) -> RefitReplay:
    """The rank load of ``shape`` converted by ``strategy``, then ``refits`` refits of every
    layer in ``way``, on one allocator model, until the first OOM.

    ``loaded_intermediate``: the I per rank the checkpoint is loaded at when vLLM pads it after
    loading (0.25.1's ``align_trace``, before each layer's conversion); ``None``: loaded at
    ``shape``'s own I (aligned before loading, as #54699 does). The other arguments mean what
    they do for ``replay.replay_load``. ``WeightsDoNotFit`` when the weights alone do not fit;
    ``ValueError`` for a refit that cannot run (``refit.refit_call``).
    """
    if refits < 0:
        raise ValueError(f"refits ({refits}) must be >= 0")
    padding = None
    if loaded_intermediate is not None:
        loaded = dataclasses.replace(shape, intermediate=loaded_intermediate)
        padding = align_trace(loaded, shape.intermediate)
    allocator, held, load = replay_rank(
        shape,
        strategy,
        max_split_size_mb=max_split_size_mb,
        pool=pool,
        device_bytes=device_bytes,
        other_weights_bytes=other_weights_bytes,
        padding=padding,
    )
    rounds: list[RefitRound] = []
    if refits and not load.oom:
        trace = refit_trace(shape, strategy, way)
        while len(rounds) < refits and (not rounds or rounds[-1].oom_layer is None):
            rounds.append(_replay_refit(allocator, trace, held, len(rounds) + 1))
    stats = allocator.stats()
    return RefitReplay(
        load=load,
        way=way,
        refits=refits,
        rounds=tuple(rounds),
        peak_reserved_bytes=stats.peak_reserved_bytes,
        final_reserved_bytes=stats.reserved_bytes,
        final_allocated_bytes=stats.allocated_bytes,
    )


def _replay_refit(
    allocator: Allocator, trace: LayerTrace, held: list[dict[str, Block]], refit: int
) -> RefitRound:
    """Refit number ``refit`` of every layer in turn (``held[i]``: layer ``i``'s blocks, updated),
    until a layer runs out of memory."""
    before = allocator.stats()
    oom_layer = oom_message = None
    for layer, blocks in enumerate(held):
        try:
            held[layer] = replay_step(allocator, trace, blocks)
        except OutOfMemory as error:
            oom_layer, oom_message = layer, str(error)
            break
    after = allocator.stats()
    counted = (*DEVICE_EVENTS, "num_device_alloc_failed")
    return RefitRound(
        refit=refit,
        **{key: getattr(after, key) - getattr(before, key) for key in counted},
        reserved_bytes=after.reserved_bytes,
        allocated_bytes=after.allocated_bytes,
        reserved_growth_bytes=after.reserved_bytes - before.reserved_bytes,
        oom_layer=oom_layer,
        oom_message=oom_message,
    )


@dataclass(frozen=True)
class OomReport:
    """One out-of-memory report's own facts: its rank, the form it ran, its weights and its OOM
    message's figures (GiB and MiB as PyTorch prints them, two decimals)."""

    name: str
    shape: LayerShape  # the rank's converted layer shape (I padded where vLLM pads it)
    strategy: str  # the conversion the report's vLLM ran
    loaded_intermediate: int | None  # I per rank as loaded, where vLLM pads after loading
    weights_gib: float  # the rank's weights once loaded
    tried_mib: float  # "Tried to allocate"
    total_gib: float  # "total capacity"
    free_mib: float  # "of which ... is free"
    allocated_gib: float  # "is allocated by PyTorch": live blocks + private pools' free blocks
    private_gib: float  # "allocated in private pools": their free blocks
    unallocated_mib: float  # "reserved by PyTorch but unallocated": the other free blocks

    @property
    def device_bytes(self) -> int:
        """What the device lent the allocator: reserved at the OOM plus what was still free."""
        reserved = self.allocated_gib * GiB + self.unallocated_mib * MiB
        return round(reserved + self.free_mib * MiB)

    @property
    def live_bytes(self) -> int:
        """Allocated (live) bytes at the OOM."""
        return round((self.allocated_gib - self.private_gib) * GiB)

    @property
    def other_weights_bytes(self) -> int:
        """The rank's weights less its MoE weights as loaded: the replay's ballast."""
        loaded = self.shape
        if self.loaded_intermediate is not None:
            loaded = dataclasses.replace(self.shape, intermediate=self.loaded_intermediate)
        return round(self.weights_gib * GiB) - loaded.model_bytes


#: The two reports of issue 38, each from its own thread. The GB200s' 184.31 GiB and every
#: figure of the OOM messages are theirs; the rest is stated where it is assumed.
REPORTS = {
    # vLLM #52511 (vLLM 0.25.1, NeMo-RL, sleep mode): Nemotron-3-Super-120B-A12B-BF16 at TP2.
    # config.json: hidden_size 4096, moe_latent_size 1024 (the experts' H), n_routed_experts 512,
    # moe_intermediate_size 2688 (1344 per rank, padded to 1408 = 1.38 GiB of w13 or w2),
    # relu2 experts (not gated), 40 MoE layers of 88. Weights: "231 GiB total -> ~115 GiB/GPU";
    # assumed split evenly, 115.5 GiB. Form: align_moe_weights_for_fi, then #45589's conversion.
    "vllm#52511": OomReport(
        name="vLLM #52511",
        shape=LayerShape("nemotron-3-super-120b-a12b", 2, 512, 1024, 1408, 40, False),
        strategy="preallocated",
        loaded_intermediate=1344,
        weights_gib=231 / 2,
        tried_mib=1.38 * 1024,
        total_gib=184.31,
        free_mib=191.50,
        allocated_gib=179.12,
        private_gib=60.38,
        unallocated_mib=7.44,
    ),
    # vLLM #41268's thread (vLLM 0.21, sleep mode): Qwen3-235B-A22B at TP4 ("Peak GPU memory
    # after loading weights: 109.71 GiB"). Form: 0.21's per-expert clone/stack conversion,
    # before #45589: ``legacy``.
    "vllm#41268": OomReport(
        name="vLLM #41268",
        shape=layer_shape("qwen3-235b-a22b", 4),
        strategy="legacy",
        loaded_intermediate=None,
        weights_gib=109.71,
        tried_mib=20.00,
        total_gib=184.31,
        free_mib=21.50,
        allocated_gib=181.80,
        private_gib=71.20,
        unallocated_mib=13.63,
    ),
}


def replay_report(
    report: str, strategy: str | None = None, refits: int = 0, *, way: str = "direct"
) -> RefitReplay:
    """``REPORTS[report]``'s rank replayed from its own facts (sleep pool,
    ``max_split_size_mb:20``, its ``device_bytes`` and ballast) with its own form, or with
    ``strategy`` loaded at the padded size (a form that aligns before loading), then
    ``refits`` refits in ``way``."""
    facts = REPORTS[report]
    own = strategy is None
    return replay_refits(
        facts.shape,
        facts.strategy if own else strategy,
        refits,
        way=way,
        device_bytes=facts.device_bytes,
        other_weights_bytes=facts.other_weights_bytes,
        loaded_intermediate=facts.loaded_intermediate if own else None,
    )
