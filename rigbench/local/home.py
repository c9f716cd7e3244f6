"""Where local-mode state lives on disk."""

import os
from dataclasses import dataclass
from pathlib import Path

# Environment variables local mode reads.
HOME_ENV = "RIGBENCH_HOME"  # the state directory
QUOTA_ENV = "RIGBENCH_LOCAL_QUOTA_VCPUS"  # the emulated G/VT vCPU quota
PRICE_ENV = "RIGBENCH_LOCAL_SPOT_PRICE"  # the emulated spot price, USD/h


@dataclass(frozen=True)
class LocalHome:
    """The state directory of local mode and its fixed layout."""

    root: Path

    @classmethod
    def resolve(cls, root: Path | None = None) -> "LocalHome":
        """`root`, else `$RIGBENCH_HOME`, else `.rigbench` in the working directory."""
        if root is None:
            env = os.environ.get(HOME_ENV)
            root = Path(env) if env else Path.cwd() / ".rigbench"
        return cls(root.resolve())

    @property
    def procs(self) -> Path:
        """One pidfile per live process group started by a local run."""
        return self.root / "procs"

    @property
    def instances(self) -> Path:
        """One workspace per emulated instance."""
        return self.root / "instances"

    @property
    def data(self) -> Path:
        """Saved emulated tables and buckets (the results that outlast a run)."""
        return self.root / "data"

    def stop_request(self, sweep_id: str) -> Path:
        """`rigbench stop --local` asks the process running the sweep to stop it here (a local
        sweep's execution lives in that process); that process removes it once it has."""
        return self.root / "stop-requests" / f"{sweep_id}.json"

    def report(self, sweep_id: str) -> Path:
        """A sweep's report page: written when `rigbench run --local` ends, else kept from
        what WriteReport stored in the emulated bucket."""
        return self.root / f"report-{sweep_id}.html"

    def ensure(self) -> "LocalHome":
        for path in (self.procs, self.instances, self.data):
            path.mkdir(parents=True, exist_ok=True)
        return self
