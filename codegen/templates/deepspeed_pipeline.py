# DeepSpeed PipelineModule with the planner's stage boundaries and topology (partition.json):
# layer i of the model goes to stage s when parts[s] <= i < parts[s + 1]; ranks are laid out as
# PipeModelDataParallelTopology(num_pp, num_mp, num_dp) does (model fastest, then data, then pipe),
# which is the launch directory's rank order (tp fastest, then dp, then pp).
import json, os

from deepspeed.pipe import PipelineModule
from deepspeed.runtime.pipe.topology import PipeModelDataParallelTopology

_HERE = os.path.dirname(os.path.abspath(__file__))
PARTITION = json.load(open(os.path.join(_HERE, "partition.json")))


def topology():
    t = PARTITION["topology"]
    return PipeModelDataParallelTopology(num_pp=t["num_pp"], num_mp=t["num_mp"], num_dp=t["num_dp"])


class PlannedPipelineModule(PipelineModule):
    """PipelineModule(layers, topology=topology(), ...) with the planner's boundaries."""

    def __init__(self, layers, **kwargs):
        if "num_stages" not in kwargs:
            kwargs.setdefault("topology", topology())
        super().__init__(layers, **kwargs)

    def _partition_layers(self, method="uniform"):
        super()._partition_layers(method="uniform")
        self.parts = list(PARTITION["parts"])
        stage = self.stage_id
        self._set_bounds(start=self.parts[stage], stop=self.parts[stage + 1])
