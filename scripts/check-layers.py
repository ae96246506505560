#!/usr/bin/env python3
"""Checks that every #include between Loom's components follows the arrows of DESIGN.md's layout
table (dependencies point down only: sim/ and exec/ meet only through core/; the GUI does not use
cli/). Prints one line per include that breaks them and exits 1; exits 0 when all follow them."""
import pathlib
import re
import sys

# Component -> the components it may include (besides itself), from DESIGN.md's "may use" column.
MAY_USE = {
    "core": set(),
    "sim": {"core"},
    "planner": {"core", "sim"},
    "kernels": set(),
    "exec": {"core", "kernels"},
    "gui": {"core", "planner", "sim"},
    "cli": {"core", "sim", "planner", "kernels", "exec", "gui"},
}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([a-z_]+)/')


def main() -> int:
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".")
    broken = []
    for component, allowed in MAY_USE.items():
        for path in sorted((root / component).rglob("*")):
            if path.suffix not in {".h", ".cc", ".cu", ".cuh"}:
                continue
            for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
                m = INCLUDE.match(line)
                if m and m.group(1) in MAY_USE and m.group(1) != component and m.group(1) not in allowed:
                    broken.append(f"{path.relative_to(root)}:{number}: {component}/ may not include "
                                  f"{m.group(1)}/ (DESIGN.md layout table)")
    for line in broken:
        print(line)
    print(f"{len(broken)} include(s) against the layout table")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
