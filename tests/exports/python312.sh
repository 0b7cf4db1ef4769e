#!/usr/bin/env bash
# Prints a Python 3.12 interpreter (megatron-bridge needs 3.12): $PYTHON312, python3.12 on PATH, or pyenv's newest
# 3.12.x; else says so on stderr and exits 77.
for p in "${PYTHON312:-}" python3.12 $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.12*/bin/python3.12 2>/dev/null | sort -V | tail -1); do
  [ -n "$p" ] && command -v "$p" >/dev/null 2>&1 && "$p" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 12))' 2>/dev/null \
    && { command -v "$p"; exit 0; }
done
echo "no Python 3.12 (megatron-bridge needs it; Debian 12 has 3.11): set PYTHON312, or install one (pyenv install 3.12)" >&2
exit 77
