# DeepSpeed PipelineModule with the planner's stage boundaries (partition.json):
# layer i of the model goes to stage s when parts[s] <= i < parts[s + 1].
import json, os

from deepspeed.pipe import PipelineModule

_HERE = os.path.dirname(os.path.abspath(__file__))
PARTITION = json.load(open(os.path.join(_HERE, "partition.json")))


class PlannedPipelineModule(PipelineModule):
    """PipelineModule(layers, num_stages=PARTITION['num_stages'], ...) with the planner's boundaries."""

    def _partition_layers(self, method="uniform"):
        super()._partition_layers(method="uniform")
        self.parts = list(PARTITION["parts"])
        stage = self.stage_id
        self._set_bounds(start=self.parts[stage], stop=self.parts[stage + 1])
