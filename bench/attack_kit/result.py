"""What one attack reports: what was tried, whether the system held, the figures."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Result:
    name: str
    tried: str
    held: bool = False
    figures: list[str] = field(default_factory=list)
    error: str = ""  # the attack itself could not run (not a verdict)

    def add(self, line: str) -> None:
        self.figures.append(line)

    def render(self) -> str:
        verdict = "ERROR" if self.error else "HELD" if self.held else "NOT HELD"
        lines = [f"== {self.name}: {verdict}", f"   tried: {self.tried}"]
        lines += [f"   - {line}" for line in self.figures]
        if self.error:
            lines.append(f"   ! attack could not run: {self.error}")
        return "\n".join(lines)
