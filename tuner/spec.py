"""What a kernel author imports: the contract a kernel spec fills in (:mod:`tuner.contract`).

    from tuner.spec import Buffer, KernelSpec, Launch, Scalar      # a full spec
    from tuner.spec import In, LightSpec, Out                        # a light one
    from tuner.spec import ProgramSpec                               # a kernel its own program builds and times
"""

from tuner.contract.kernel_spec import (
    EXPECTED,
    Buffer,
    Config,
    DeviceInfo,
    KernelSpec,
    Launch,
    OutputSpec,
    Problem,
    RandomTable,
    ReferenceKernel,
    Scalar,
    TensorMap,
    Value,
    host_inputs,
    load_spec,
)
from tuner.contract.light import In, LightSpec, Out
from tuner.contract.program import ProgramSpec

__all__ = ["EXPECTED", "Buffer", "Config", "DeviceInfo", "In", "KernelSpec", "Launch", "LightSpec", "Out", "OutputSpec",
           "ProgramSpec", "Problem", "RandomTable", "ReferenceKernel", "Scalar", "TensorMap", "Value", "host_inputs", "load_spec"]
