"""Type stubs of the extension module _ppsched (pybind11 bindings of the ppsched C++ library)."""

from typing import Iterator, Optional, Sequence, Union, overload

class Error(ValueError):
    """A ppsched input was rejected: the message names the input, the place and the fix."""

# ---------------------------------------------------------------- actions and schedules

class Action:
    """One action of a rank's program; str() is PyTorch's action string ("0F3")."""

    def __init__(self, stage: int, op: str, microbatch: int, group: int = 0) -> None: ...
    @property
    def stage(self) -> int: ...
    @property
    def op(self) -> str:
        """F, B, I, W, SEND_F, RECV_F, SEND_B, RECV_B, R, OFFLOAD or RELOAD."""
    @property
    def microbatch(self) -> int: ...
    @property
    def group(self) -> int: ...
    @property
    def is_compute(self) -> bool: ...
    @property
    def is_comm(self) -> bool: ...
    @property
    def is_memory(self) -> bool: ...
    def __eq__(self, other: object) -> bool: ...
    def __lt__(self, other: Action) -> bool: ...
    def __hash__(self) -> int: ...

def parse_action(text: str) -> Union[Action, tuple[Action, ...]]:
    """'0F3' -> Action; '(0F7;7B3)OVERLAP_F_B' -> a tuple of its sub-actions."""

class Schedule:
    name: str
    ranks: int
    microbatches: int
    split_backward: bool
    placement: list[int]
    """placement[stage] = rank (a copy; assign a new list to change it)"""
    programs: list[list[Action]]
    """programs[rank] = the rank's actions in issue order (a copy)"""

    def __init__(
        self,
        *,
        programs: Sequence[Sequence[Action]],
        placement: Sequence[int],
        microbatches: int,
        name: str = "schedule",
        ranks: Optional[int] = None,
        split_backward: Optional[bool] = None,
    ) -> None: ...
    @property
    def stages(self) -> int: ...
    @property
    def lowered(self) -> bool: ...
    def rank_of(self, stage: int) -> int: ...
    def __eq__(self, other: object) -> bool: ...
    def __copy__(self) -> Schedule: ...
    def __deepcopy__(self, memo: object) -> Schedule: ...

class Family:
    @property
    def name(self) -> str: ...
    @property
    def rule(self) -> str: ...
    @property
    def summary(self) -> str: ...
    @property
    def placement(self) -> str: ...
    @property
    def chunks(self) -> int:
        """Chunks per rank it is built with; 0 when it takes any number."""
    @property
    def split_backward(self) -> bool: ...
    @property
    def training(self) -> bool: ...
    @property
    def overlapped_pairs(self) -> bool: ...
    @property
    def bubble_formula(self) -> Optional[str]: ...
    def chunks_for(self, wanted: int) -> int: ...
    def accepts(self, *, ranks: int, microbatches: int, chunks: Optional[int] = None) -> bool: ...
    def why_not(self, *, ranks: int, microbatches: int, chunks: Optional[int] = None) -> str: ...

def families() -> list[Family]: ...
def family(name: str) -> Family: ...
def family_names() -> list[str]: ...
def make_schedule(family: str, *, ranks: int, microbatches: int, chunks: Optional[int] = None) -> Schedule: ...
def one_stage_per_rank_placement(ranks: int) -> list[int]: ...
def looped_placement(ranks: int, chunks: int) -> list[int]: ...
def v_shape_placement(ranks: int) -> list[int]: ...

# ---------------------------------------------------------------- PyTorch's formats

def to_pytorch_csv(schedule: Schedule, *, comms: bool = False, groups: bool = True, bookkeeping: bool = True) -> str: ...
def to_pytorch_actions(
    schedule: Schedule, *, comms: bool = False, groups: bool = True, bookkeeping: bool = True
) -> dict[int, list[str]]: ...
def from_pytorch_csv(
    text: str,
    *,
    placement: Optional[Sequence[int]] = None,
    microbatches: int = 0,
    name: str = "csv",
    source: str = "<text>",
) -> Schedule: ...
def from_pytorch_actions(
    actions: Union[dict[int, Sequence[str]], Sequence[Sequence[str]]],
    *,
    placement: Optional[Sequence[int]] = None,
    microbatches: int = 0,
    name: str = "actions",
) -> Schedule: ...
def save_pytorch_csv(
    schedule: Schedule, path: str, *, comms: bool = False, groups: bool = True, bookkeeping: bool = True
) -> None: ...
def load_pytorch_csv(path: str, *, placement: Optional[Sequence[int]] = None, microbatches: int = 0) -> Schedule: ...
def strip_memory_actions(schedule: Schedule) -> Schedule: ...
def strip_communication(schedule: Schedule) -> Schedule: ...
def is_lowered(schedule: Schedule) -> bool: ...

# ---------------------------------------------------------------- lowering and validation

def lower(schedule: Schedule, *, costs: Optional[CostModel] = None, group: bool = True) -> Schedule: ...

class Problem:
    @property
    def kind(self) -> str: ...
    @property
    def rank(self) -> int: ...
    @property
    def position(self) -> int: ...
    @property
    def action(self) -> Optional[Action]: ...
    @property
    def message(self) -> str: ...

class RankMemory:
    @property
    def peak_activations(self) -> float: ...
    @property
    def peak_bytes(self) -> float: ...
    @property
    def peak_in_flight(self) -> int: ...
    @property
    def peak_microbatches(self) -> float: ...

class Validation:
    @property
    def ok(self) -> bool: ...
    @property
    def message(self) -> str: ...
    @property
    def problems(self) -> list[Problem]: ...
    @property
    def unlisted_problems(self) -> int: ...
    @property
    def deadlock(self) -> bool: ...
    @property
    def lowered(self) -> bool: ...
    @property
    def deadlock_checked(self) -> bool: ...
    @property
    def memory(self) -> list[RankMemory]: ...
    @property
    def stage_peak_in_flight(self) -> list[int]: ...
    def __bool__(self) -> bool: ...

def validate(
    schedule: Schedule,
    *,
    costs: Optional[CostModel] = None,
    check_deadlock: bool = True,
    weight_fraction: float = 0.5,
    max_problems: int = 1000,
) -> Validation: ...

# ---------------------------------------------------------------- hardware and costs

class Device:
    speed: float
    memory_bytes: float
    def __init__(self, *, speed: float = 1.0, memory_bytes: float = ...) -> None: ...

class Interconnect:
    latency: float
    bandwidth: float
    def __init__(self, *, latency: float = 0.0, bandwidth: float = ...) -> None: ...
    def transfer_time(self, bytes: float) -> float: ...

class StageCost:
    forward: float
    backward_input: float
    backward_weight: float
    backward: Optional[float]
    activation_bytes: float
    output_bytes: float
    recompute: Optional[float]
    recompute_saved_bytes: Optional[float]
    recompute_peak_bytes: Optional[float]
    offload_bytes: Optional[float]
    weight_memory_fraction: Optional[float]
    def __init__(
        self,
        *,
        forward: float = 1.0,
        backward_input: float = 1.0,
        backward_weight: float = 1.0,
        backward: Optional[float] = None,
        activation_bytes: float = 0.0,
        output_bytes: float = 0.0,
        recompute: Optional[float] = None,
        recompute_saved_bytes: Optional[float] = None,
        offload_bytes: Optional[float] = None,
        weight_memory_fraction: Optional[float] = None,
    ) -> None: ...

class CostModel:
    unit: str
    stages: list[StageCost]
    microbatch_scale: list[float]
    per_microbatch: list[StageCost]
    link: Interconnect
    weight_memory_fraction: float
    fb_overlap: float
    action_overhead: float
    transfer_overhead: float
    step_overhead: float
    host_link: Interconnect
    concurrent_slowdown: list[float]
    def __init__(
        self,
        *,
        stages: Sequence[StageCost],
        unit: str = "unit",
        microbatch_scale: Sequence[float] = ...,
        per_microbatch: Sequence[StageCost] = ...,
        link: Interconnect = ...,
        weight_memory_fraction: float = 0.5,
        fb_overlap: float = 0.0,
        action_overhead: float = 0.0,
        transfer_overhead: float = 0.0,
        step_overhead: float = 0.0,
        host_link: Interconnect = ...,
        concurrent_slowdown: Sequence[float] = ...,
    ) -> None: ...
    def check(self, stages: int, microbatches: int) -> None: ...

def uniform_costs(
    forward: float = 1.0, backward_input: float = 1.0, backward_weight: float = 1.0, *, unit: str = "unit"
) -> CostModel: ...

# ---------------------------------------------------------------- timelines and simulation

class Span:
    def __init__(
        self,
        *,
        rank: int,
        stage: int,
        op: str,
        microbatch: int,
        start: float,
        end: float,
        lane: str = "compute",
        group: int = 0,
    ) -> None: ...
    @property
    def rank(self) -> int: ...
    @property
    def stage(self) -> int: ...
    @property
    def op(self) -> str: ...
    @property
    def microbatch(self) -> int: ...
    @property
    def action(self) -> Action: ...
    @property
    def lane(self) -> str:
        """'compute', 'comm' or 'copy'."""
    @property
    def start(self) -> float: ...
    @property
    def end(self) -> float: ...
    @property
    def duration(self) -> float: ...

class Timeline:
    ranks: int
    unit: str
    spans: list[Span]
    @overload
    def __init__(self, *, ranks: int, spans: Sequence[Span], unit: str = "unit") -> None: ...
    @overload
    def __init__(self, simulation: Simulation) -> None: ...
    def __len__(self) -> int: ...
    def __getitem__(self, i: int) -> Span: ...
    def __iter__(self) -> Iterator[Span]: ...
    def to_list(self) -> list[dict[str, Union[int, float, str]]]: ...

class SimRankStats:
    first_start: float
    last_end: float
    span: float
    busy: float
    input_wait: float
    idle: float
    idle_in_span: float

class MemorySample:
    time: float
    activations: float
    bytes: float

class Simulation:
    @property
    def makespan(self) -> float: ...
    @property
    def bubble_fraction(self) -> float: ...
    @property
    def bubble_per_rank(self) -> list[float]: ...
    @property
    def ranks(self) -> list[SimRankStats]: ...
    @property
    def ideal_time(self) -> float: ...
    @property
    def bubble_vs_ideal(self) -> float: ...
    @property
    def memory(self) -> list[RankMemory]: ...
    @property
    def peak_memory(self) -> list[float]:
        """Per rank, peak stored activations in M_B."""
    @property
    def peak_memory_bytes(self) -> list[float]: ...
    @property
    def stage_peak_in_flight(self) -> list[int]: ...
    @property
    def memory_over_time(self) -> list[list[MemorySample]]: ...
    @property
    def timed_peak(self) -> list[MemorySample]: ...
    @property
    def lowered_internally(self) -> bool: ...
    @property
    def step_overhead(self) -> float: ...
    @property
    def timeline(self) -> Timeline: ...

def simulate(
    schedule: Schedule,
    costs: Optional[CostModel] = None,
    *,
    comm_on_compute_stream: bool = False,
    ideal_communication: bool = False,
    record_timeline: bool = True,
) -> Simulation: ...

class AnalyticBubble:
    family: str
    formula: str
    measured_against: str
    idle_per_rank: float
    holds: bool
    condition: str

def analytic_bubble(
    family: str,
    *,
    ranks: int,
    microbatches: int,
    chunks: int = 1,
    forward: float = 1.0,
    backward_input: float = 1.0,
    backward_weight: float = 1.0,
) -> AnalyticBubble: ...

# ---------------------------------------------------------------- timeline statistics and writers

_TimelineLike = Union[Timeline, Simulation]

class RankStats:
    rank: int
    actions: int
    first_start: float
    last_end: float
    span: float
    busy: float
    comm_wait: float
    idle: float
    bubble_fraction: float
    span_bubble_fraction: float

class TimelineStats:
    ranks: int
    unit: str
    spans: int
    origin: float
    finish: float
    makespan: float
    total_busy: float
    total_comm_wait: float
    total_idle: float
    bubble_fraction: float
    ideal_time: float
    bubble_vs_ideal: float
    per_rank: list[RankStats]
    def count(self, op: str) -> int: ...

class TimelineComparison: ...

def summarize(timeline: _TimelineLike) -> TimelineStats: ...
def to_ascii(
    timeline: _TimelineLike,
    *,
    columns: int = 0,
    max_columns: int = 120,
    microbatch_digits: bool = False,
    comm_rows: bool = False,
    ruler: bool = True,
    legend: bool = True,
) -> str: ...
def to_chrome_trace(
    timeline: _TimelineLike, *, title: str = "", microseconds_per_unit: float = 0.0, process_label: str = "rank"
) -> str: ...
def write_chrome_trace(
    timeline: _TimelineLike,
    path: str,
    *,
    title: str = "",
    microseconds_per_unit: float = 0.0,
    process_label: str = "rank",
) -> None: ...
def to_svg(
    timeline: _TimelineLike,
    *,
    title: str = "",
    width: float = 1600.0,
    row_height: float = 30.0,
    microbatch_labels: bool = True,
) -> str: ...
def write_svg(
    timeline: _TimelineLike,
    path: str,
    *,
    title: str = "",
    width: float = 1600.0,
    row_height: float = 30.0,
    microbatch_labels: bool = True,
) -> None: ...
def to_timeline_csv(timeline: _TimelineLike) -> str: ...
def parse_timeline_csv(text: str, *, source: str = "<string>") -> Timeline: ...
def load_timeline_csv(path: str) -> Timeline: ...
def compare_timelines(measured: _TimelineLike, predicted: _TimelineLike) -> TimelineComparison: ...

# ---------------------------------------------------------------- layers, profiles, partitions

class Layer:
    name: str
    forward: float
    backward_input: float
    backward_weight: float
    backward: Optional[float]
    param_bytes: float
    activation_bytes: float
    output_bytes: float
    recompute_saves_bytes: Optional[float]
    recompute_time: Optional[float]
    weight_bytes: Optional[float]
    boundary_bytes: Optional[float]
    boundary_weight_bytes: Optional[float]
    def __init__(
        self,
        *,
        name: str = "",
        forward: float = 0.0,
        backward_input: float = 0.0,
        backward_weight: float = 0.0,
        backward: Optional[float] = None,
        param_bytes: float = 0.0,
        activation_bytes: float = 0.0,
        output_bytes: float = 0.0,
    ) -> None: ...

class LayerGraph:
    def __init__(self, layers: Sequence[Layer], edges: Optional[Sequence[tuple[int, int]]] = None) -> None: ...
    @property
    def layers(self) -> list[Layer]: ...
    @property
    def edges(self) -> list[tuple[int, int]]: ...
    @property
    def topological_order(self) -> list[int]: ...
    @property
    def is_chain(self) -> bool: ...
    def __len__(self) -> int: ...

class Profile:
    graph: LayerGraph
    devices: list[Device]
    link: Interconnect
    time_unit: str
    rows: float
    action_overhead: float
    transfer_overhead: float
    step_overhead: float
    concurrent_slowdown: list[float]
    first_stage_backward_in_bw: bool
    def __init__(
        self,
        graph: LayerGraph,
        *,
        devices: Sequence[Device] = ...,
        link: Interconnect = ...,
        time_unit: str = "",
        rows: float = 0.0,
    ) -> None: ...
    @property
    def layers(self) -> list[Layer]: ...
    def at_rows(self, rows: float, reference_rows: float = 0.0) -> Profile: ...

def load_profile(path: str) -> Profile: ...
def parse_profile(text: str, *, source: str = "<string>") -> Profile: ...
def profile_to_json(profile: Profile, *, indent: int = 2) -> str: ...

class PartitionStage:
    rank: int
    begin: int
    end: int
    first_layer_name: str
    last_layer_name: str
    speed: float
    forward: float
    backward_input: float
    backward_weight: float
    backward: Optional[float]
    compute_time: float
    recv_time: float
    send_time: float
    recv_bytes: float
    send_bytes: float
    time: float
    param_bytes: float
    static_bytes: float
    activation_bytes: float
    in_flight: float
    peak_bytes: float
    memory_cap: float
    @property
    def size(self) -> int: ...
    @property
    def fits_memory(self) -> bool: ...

class Partition:
    method: str
    order: list[int]
    boundaries: list[int]
    stages: list[PartitionStage]
    bottleneck: float
    bottleneck_stage: int
    mean_time: float
    imbalance: float
    @property
    def fits_memory(self) -> bool: ...
    def layers_of(self, stage: int) -> list[int]: ...
    def __len__(self) -> int: ...
    # The planner's cuts are Partitions too (PartitionPlan is an alias):
    @property
    def bottleneck_time(self) -> float: ...
    def cost_model(self) -> CostModel: ...
    def cut_text(self) -> str: ...

def partition(
    model: Union[LayerGraph, Profile, Sequence[Layer]],
    *,
    stages: int = 0,
    method: str = "optimal",
    devices: Optional[Sequence[Device]] = None,
    link: Optional[Interconnect] = None,
    optimizer_state_factor: float = 8.0,
    inflight: Sequence[float] = ...,
    order: Sequence[int] = ...,
    boundaries: Optional[Sequence[int]] = None,
) -> Partition: ...
def inflight_1f1b(stages: int, microbatches: int = ...) -> list[float]: ...
def inflight_gpipe(stages: int, microbatches: int) -> list[float]: ...

# ---------------------------------------------------------------- the planner

class MemoryPolicy:
    def __init__(
        self,
        kind: str = "none",
        *,
        fraction: float = 1.0,
        saved_bytes: Optional[float] = None,
        recompute_time: Optional[float] = None,
        peak_bytes: Optional[float] = None,
    ) -> None: ...
    @staticmethod
    def none() -> MemoryPolicy: ...
    @staticmethod
    def full_recompute() -> MemoryPolicy: ...
    @staticmethod
    def selective(fraction: float) -> MemoryPolicy: ...
    @staticmethod
    def offload(fraction: float = 1.0) -> MemoryPolicy: ...
    @property
    def kind(self) -> str: ...
    @property
    def fraction(self) -> float: ...
    @property
    def saved_bytes(self) -> Optional[float]: ...
    @property
    def recompute_time(self) -> Optional[float]: ...
    @property
    def peak_bytes(self) -> Optional[float]: ...

class MemoryPlan:
    schedule: Schedule
    costs: CostModel
    policies: list[MemoryPolicy]

def apply_memory_policies(schedule: Schedule, costs: CostModel, policies: Sequence[MemoryPolicy]) -> MemoryPlan: ...

PartitionPlan = Partition

class ScheduleResult:
    name: str
    chunks: int
    virtual_stages: int
    training: bool
    valid: bool
    problems: list[str]
    makespan: float
    max_rank_span: float
    bubble_fraction: float
    ideal_time: float
    busy: list[float]
    span: list[float]
    peak_activations: list[float]
    static_bytes: list[float]
    peak_activation_bytes: list[float]
    peak_memory_bytes: list[float]
    throughput: float
    analytic_idle_per_rank: Optional[float]
    analytic_formula: str
    fits: bool
    fit_problem: str
    schedule: Schedule
    timeline: Timeline
    partition: Partition
    @property
    def family(self) -> Optional[str]: ...
    @property
    def memory_policies(self) -> Optional[list[MemoryPolicy]]: ...

class SkippedSchedule:
    name: str
    reason: str
    cannot_cut: bool
    chunks: int

class PlanResult:
    model: str
    unit: str
    ranks: int
    microbatches: int
    chunks: int
    partition: Partition
    schedules: list[ScheduleResult]
    skipped: list[SkippedSchedule]
    rank_memory_cap: list[float]
    @property
    def recommended(self) -> Optional[ScheduleResult]: ...
    @property
    def reason(self) -> str: ...

def plan(
    profile: Profile,
    *,
    ranks: int,
    microbatches: int,
    chunks: int = 2,
    families: Sequence[str] = ...,
    memory_cap: Optional[float] = None,
    memory_cap_microbatches: Optional[float] = None,
    memory_policy: Union[str, dict[int, MemoryPolicy], None] = "none",
    host_link: Optional[Interconnect] = None,
    objective: str = "makespan",
    makespan_bound: float = ...,
    optimizer_state_factor: float = 8.0,
    weight_memory_fraction: float = 0.5,
    method: str = "optimal",
    description: str = "",
) -> PlanResult: ...

# ---------------------------------------------------------------- the schedule search

class Candidate:
    name: str
    chunks: int
    built: bool
    bound: float
    makespan: float
    bubble_fraction: float
    span: float
    peak_microbatches: float
    peak_bytes: float
    fits: bool
    note: str
    @property
    def kind(self) -> str: ...
    @property
    def family(self) -> Optional[str]: ...
    @property
    def placement(self) -> str: ...
    @property
    def timing(self) -> str: ...
    @property
    def timed(self) -> bool: ...

class SearchResult:
    schedule: Schedule
    lowered: Schedule
    costs: CostModel
    simulation: Simulation
    validation: Validation
    candidates: list[Candidate]
    winner: int
    why: str
    @property
    def makespan(self) -> float: ...
    @property
    def best(self) -> Candidate: ...
    @property
    def best_family(self) -> Optional[Candidate]: ...

def search_schedule(
    *,
    ranks: int,
    microbatches: int,
    costs: CostModel,
    memory_cap_microbatches: float = ...,
    activation_bytes_cap: float = ...,
    rank_activation_bytes: Sequence[float] = ...,
    chunks: Optional[Sequence[int]] = None,
    fixed_families: Optional[bool] = None,
    greedy: Optional[bool] = None,
    dualpipev: Optional[bool] = None,
    v_blocks: Optional[bool] = None,
    split_backward: Optional[bool] = None,
    fb_overlap: Optional[float] = None,
    max_simulations: Optional[int] = None,
    comm_on_compute_stream: Optional[bool] = None,
    objective: str = "makespan",
    makespan_bound: float = ...,
) -> SearchResult: ...

class SearchedPlan:
    plan: PlanResult
    @property
    def candidates(self) -> list[Candidate]: ...
    @property
    def why(self) -> str: ...
    @property
    def recommended(self) -> Optional[ScheduleResult]: ...

def search_plan(
    profile: Profile,
    *,
    ranks: int,
    microbatches: int,
    chunks: int = 2,
    memory_cap: Optional[float] = None,
    memory_cap_microbatches: Optional[float] = None,
    memory_policy: Union[str, dict[int, MemoryPolicy], None] = "none",
    host_link: Optional[Interconnect] = None,
    objective: str = "makespan",
    makespan_bound: float = ...,
    optimizer_state_factor: float = 8.0,
    weight_memory_fraction: float = 0.5,
    method: str = "optimal",
    description: str = "",
    fixed_families: Optional[bool] = None,
    greedy: Optional[bool] = None,
    dualpipev: Optional[bool] = None,
    v_blocks: Optional[bool] = None,
    split_backward: Optional[bool] = None,
    fb_overlap: Optional[float] = None,
    max_simulations: Optional[int] = None,
    comm_on_compute_stream: Optional[bool] = None,
) -> SearchedPlan: ...

class DeviceSplit:
    pipeline: int
    replicas: int
    microbatches: int
    microbatch_size: float
    chunks: int
    schedule: Schedule
    partition: Partition
    pipeline_time: float
    bubble_fraction: float
    all_reduce_longest: float
    all_reduce_exposed: float
    step_time: float
    peak_memory_bytes: float
    fits: bool
    fit_problem: str
    @property
    def family(self) -> Optional[str]: ...

class DevicePlan:
    model: str
    unit: str
    devices: int
    global_batch: int
    memory_cap_bytes: Optional[float]
    chosen: Optional[DeviceSplit]
    alternatives: list[DeviceSplit]
    per_pipeline: list[str]
    reason: str
    evaluated: int

def plan_devices(
    profile: Profile,
    *,
    devices: int,
    global_batch: int,
    memory_cap: Optional[float] = None,
    families: Sequence[str] = ...,
    chunks: int = 2,
    pipeline_sizes: Sequence[int] = ...,
    microbatch_counts: Sequence[int] = ...,
    max_microbatches: int = 64,
    profile_microbatch_size: float = 1.0,
    optimizer_state_factor: float = 8.0,
    weight_memory_fraction: float = 0.5,
    method: str = "optimal",
    all_reduce_link: Optional[Interconnect] = None,
    alternatives: int = 5,
    description: str = "",
) -> DevicePlan: ...

# ---------------------------------------------------------------- Megatron and torchtitan layouts

class LayerKind:
    embedding: LayerKind
    transformer: LayerKind
    mtp: LayerKind
    loss: LayerKind
    @property
    def letter(self) -> str: ...
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    def __init__(self, value: int) -> None: ...
    def __int__(self) -> int: ...

_Kind = Union[LayerKind, str]

class StageLayout:
    def __init__(self, stages: Sequence[Union[str, Sequence[_Kind]]], *, ranks: int = 0) -> None: ...
    ranks: int
    @property
    def stages(self) -> list[list[LayerKind]]: ...
    @property
    def letters(self) -> list[str]: ...
    @property
    def stage_count(self) -> int: ...
    @property
    def virtual_stages(self) -> int: ...
    def rank_of(self, stage: int) -> int: ...
    def virtual_stage_of(self, stage: int) -> int: ...
    def stage_at(self, rank: int, virtual_stage: int) -> int: ...
    def count(self, kind: _Kind, stage: Optional[int] = None) -> int: ...
    def offset(self, stage: int, kind: _Kind) -> int: ...
    def __len__(self) -> int: ...

def to_megatron_layout(layout: StageLayout) -> str: ...
def parse_megatron_layout(text: str, *, ranks: int = 0) -> StageLayout: ...
def check_megatron_layout(
    layout: StageLayout, *, transformer_layers: Optional[int] = None, mtp_layers: Optional[int] = None
) -> None: ...
def layer_kind(name: str) -> LayerKind: ...
def layer_kinds(graph: Union[LayerGraph, Profile, Sequence[Layer]], overrides: dict[str, _Kind] = ...) -> list[LayerKind]: ...
def stage_layout(
    cut: Union[Partition, Sequence[int]], kinds: Union[str, Sequence[_Kind]], *, ranks: int
) -> StageLayout: ...
def megatron_boundaries(layout: StageLayout, kinds_in_order: Union[str, Sequence[_Kind]]) -> list[int]: ...
def torchtitan_module_fqns(
    partition: Partition,
    graph: Union[LayerGraph, Profile, Sequence[Layer]],
    *,
    fqns_by_layer: Optional[Sequence[Sequence[str]]] = None,
) -> list[list[str]]: ...
def torchtitan_boundaries(
    fqns_per_stage: Sequence[Sequence[str]],
    graph: Union[LayerGraph, Profile, Sequence[Layer]],
    *,
    fqns_by_layer: Optional[Sequence[Sequence[str]]] = None,
    order: Sequence[int] = ...,
) -> list[int]: ...
def torchtitan_llm_fqns(layout: StageLayout) -> list[list[str]]: ...
def layout_of_torchtitan_llm_fqns(fqns_per_stage: Sequence[Sequence[str]], *, ranks: int = 0) -> StageLayout: ...

# ---------------------------------------------------------------- variable-length batches

class MicrobatchShape:
    def __init__(self, *, tokens: float = 0.0, squares: float = 0.0) -> None: ...
    tokens: float
    squares: float

def shape_of(lengths: Sequence[int], *, padded_length: int = 0) -> MicrobatchShape: ...

class LengthSample:
    def __init__(self, lengths: Sequence[int], stages: Sequence[StageCost]) -> None: ...
    lengths: list[int]
    stages: list[StageCost]

class TermFit:
    fixed: float
    per_token: float
    per_square: float
    max_residual: float
    max_relative_residual: float
    def at(self, shape: MicrobatchShape) -> float: ...

class StageLengthFit:
    forward: TermFit
    backward_input: TermFit
    backward_weight: TermFit
    backward: Optional[TermFit]
    activation_bytes: TermFit
    output_bytes: TermFit
    def cost_at(self, shape: MicrobatchShape) -> StageCost: ...

class LengthCosts:
    stages: list[StageLengthFit]
    samples: int
    @property
    def max_relative_residual(self) -> float: ...

def fit_length_costs(samples: Sequence[LengthSample]) -> LengthCosts: ...
def length_samples(profile: Profile, sequence_length: int) -> list[LengthSample]: ...

class SplitMethod:
    padded: SplitMethod
    packed: SplitMethod
    bucketed: SplitMethod
    balanced: SplitMethod
    @property
    def name(self) -> str: ...
    @property
    def value(self) -> int: ...
    def __init__(self, value: int) -> None: ...
    def __int__(self) -> int: ...

class Microbatch:
    sequences: list[int]
    tokens: int
    padded_length: int
    shape: MicrobatchShape

class Split:
    method: SplitMethod
    microbatches: list[Microbatch]
    token_limit: int
    tokens: float
    computed_tokens: float
    @property
    def padding_fraction(self) -> float: ...
    def __len__(self) -> int: ...

def token_limit(costs: LengthCosts, *, token_budget: Optional[int] = None, memory_cap_bytes: float = ...) -> int: ...
def split_batch(
    lengths: Sequence[int],
    costs: LengthCosts,
    method: Union[str, SplitMethod] = "balanced",
    *,
    token_budget: Optional[int] = None,
    memory_cap_bytes: float = ...,
    microbatches: int = 0,
) -> Split: ...
def length_cost_model(
    costs: LengthCosts, microbatches: Union[Split, Sequence[Microbatch]], *, base: Optional[CostModel] = None
) -> CostModel: ...
def plan_microbatches(
    costs: LengthCosts,
    microbatches: Union[Split, Sequence[Microbatch]],
    *,
    base: Optional[CostModel] = None,
    memory_cap_bytes: float = ...,
    chunks: Optional[Sequence[int]] = None,
    fixed_families: Optional[bool] = None,
    greedy: Optional[bool] = None,
    dualpipev: Optional[bool] = None,
    v_blocks: Optional[bool] = None,
    split_backward: Optional[bool] = None,
    fb_overlap: Optional[float] = None,
    max_simulations: Optional[int] = None,
    comm_on_compute_stream: Optional[bool] = None,
    objective: str = "makespan",
    makespan_bound: float = ...,
) -> SearchResult: ...
