"""Every tensor literal handed to a collective is made on the group's device.

NCCL takes only tensors on its GPU ("Tensors must be CUDA and dense"); a CPU machine cannot show that,
since there the group's device is the CPU. So: in the library and the course, a tensor made with
torch::tensor({...}) (on the CPU unless told otherwise) whose variable reaches allreduce_sum, broadcast or
a backend collective in the same file must name a device (.to(...), a device option). ProcessGroup
also refuses such a tensor at run time, naming the call (test ProcessGroup.RefusesATensorOffItsDevice).
The check first proves it catches a planted case (an FSDP snapshot vote once had it)."""
import pathlib
import re
import sys

LITERAL = re.compile(r"(?:auto|torch::Tensor)\s+(\w+)\s*=\s*(torch::tensor\(\{[^;]*?\)[^;]*);", re.S)
COLLECTIVE = r"(?:allreduce_sum|allreduce_sum_async|broadcast|allreduce|allgather|_allgather_base|reduce_scatter)"


def problems(text, name):
    found = []
    for m in LITERAL.finditer(text):
        var, expr = m.group(1), m.group(2)
        if ".to(" in expr or "device" in expr:
            continue
        handed = re.search(COLLECTIVE + r"\(\s*" + var + r"\b", text) or re.search(
            r"\{\s*" + var + r"\s*\}", text[m.end():])
        if handed:
            line = text.count("\n", 0, m.start()) + 1
            found.append(f"{name}:{line}: '{var}' is made on the CPU (torch::tensor without a device) and handed "
                         f"to a collective: make it on the group's device (.to(pg.device()))")
    return found


planted = """
  auto failed = torch::tensor({error.empty() ? 0.0f : 1.0f});
  pg.allreduce_sum(failed, "vote");
"""
fixed = planted.replace("});", "}).to(pg.device());")
if not problems(planted, "planted") or problems(fixed, "fixed"):
    sys.exit("collective_devices: the check does not tell the planted case from its fix")

root = pathlib.Path(sys.argv[1])
bad = []
for folder in ("ddp", "course"):
    for path in sorted((root / folder).rglob("*.cpp")) + sorted((root / folder).rglob("*.h")):
        bad += problems(path.read_text(), str(path.relative_to(root)))
for b in bad:
    print(b)
print(f"collective_devices: {len(bad)} problem(s)")
sys.exit(1 if bad else 0)
