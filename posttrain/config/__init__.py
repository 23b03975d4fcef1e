"""Pipeline configuration: the pydantic schemas of the pipeline YAML.

A pipeline YAML parses into `PipelineConfig` (`pipeline.py`); its stages (`stages.py`,
`recipe_stages.py`; the union of every registered type in `stage_union.py`), task sources
(`tasks.py`), reward settings (`rewards.py`), the algorithm settings the RL stages share
(`algo.py`) and the synthesis stage's parts (`synthesis.py`) have modules of their own, and
`files.py` reads files and turns any problem into one line naming the file, the key path and
the problem. `jobs.py` derives the RL job of each expert cell. Every schema is exported here.
This package imports no heavy library (torch, ray, vllm, deepspeed); a test checks that.
"""

from posttrain.config.algo import (  # noqa: F401
    AnnealConfig,
    BudgetConfig,
    Correction,
    ExcludeCorrection,
    GRPOConfig,
    MaskCorrection,
    PartialRolloutConfig,
    TISCorrection,
)
from posttrain.config.base import (  # noqa: F401
    BUILTIN_MODELS,
    Base,
    is_hub_id,
    model_name,
)
from posttrain.config.infra import (  # noqa: F401
    AdamWOptimizer,
    HealthConfig,
    MuonOptimizer,
    Optimizer,
    RayConfig,
    RolloutConfig,
    TrainerConfig,
    WandbConfig,
)
from posttrain.config.pipeline import ModelConfig, PipelineConfig, TinyModelConfig  # noqa: F401
from posttrain.config.recipe_stages import (  # noqa: F401
    DOMAIN_NAME,
    Domain,
    Effort,
    EffortAnneal,
    EffortSpec,
    EvalStage,
    ExpertsStage,
    JudgeRL,
    JudgeStage,
    MOPDStage,
    TeacherPoolConfig,
    TeacherSpec,
)
from posttrain.config.rewards import (  # noqa: F401
    GRMConfig,
    HTTPJudge,
    Judge,
    RewardConfig,
    VLLMJudge,
)
from posttrain.config.stage_union import Stage  # noqa: F401
from posttrain.config.stages import (  # noqa: F401
    CheckpointlessStage,
    KeepBest,
    RLStage,
    RolloutStage,
    SFTStage,
    StageBase,
    StageSchema,
    SynthesisStage,
    ThinkConfig,
    stage_name,
)
from posttrain.config.synthesis import (  # noqa: F401
    DedupCheck,
    FormatCheck,
    LengthCheck,
    OutcomeCheck,
    ReviewConfig,
    TeacherModel,
    VerifyConfig,
)
from posttrain.config.tasks import (  # noqa: F401
    AgentFamily,
    AgentTasks,
    ArithmeticTasks,
    ChatJsonl,
    CodingTasks,
    EnvTasks,
    HFTasks,
    JudgementTasks,
    LeafSource,
    MixtureTasks,
    ReasoningGymFamily,
    ReasoningGymTasks,
    SFTSource,
    SynthesisData,
    TaskSource,
    UserTasks,
    VerifiersTasks,
    WritingTasks,
)
