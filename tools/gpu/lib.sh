# Shared by tools/gpu/check.sh and recheck.sh (sourced; bundle.sh copies it into .gpu/ beside them).
# gpu_check_start NAME DEFAULT_WORK: the device call brings back at most 8 files from $OUT, so the logs go to a work
# folder ($CHECK_WORK, else DEFAULT_WORK; never $OUT itself) and after every step `publish` gives $OUT summary.txt,
# kernel-rates.txt when there is one, and all.tgz (the whole work folder): a run cut off at the call's limit still
# returns everything up to its last step. Sets FINAL (the call's $OUT), OUT (the work folder), B, P, S.
gpu_check_start() {
  FINAL=${OUT:-gpu-out}; mkdir -p "$FINAL"
  OUT=${CHECK_WORK:-$2}
  [ "$(realpath -m "$OUT")" = "$(realpath -m "$FINAL")" ] && { echo "$1: CHECK_WORK must not be \$OUT ($FINAL)" >&2; exit 2; }
  # Emptied only if a check made it (its marker is there): a folder of anyone else's is refused, never removed.
  if [ -d "$OUT" ] && [ -n "$(ls -A "$OUT")" ] && [ ! -f "$OUT/.gpu-check-work" ]; then
    echo "$1: $OUT is not empty and was not made by a GPU check; name another CHECK_WORK" >&2; exit 2
  fi
  rm -rf "$OUT"; mkdir -p "$OUT"; : > "$OUT/.gpu-check-work"
  B=.gpu/bin; P=$B/planner; S=$OUT/summary.txt
  : > "$S"
}
log() { echo "== $*" | tee -a "$S"; }
figure() { echo "FIGURE $*" | tee -a "$S"; }
publish() { cp "$S" "$FINAL/"; [ -f "$OUT/kernel-rates.txt" ] && cp "$OUT/kernel-rates.txt" "$FINAL/"
  tar czf "$FINAL/all.tgz.part" --exclude='*.bin' -C "$(dirname "$OUT")" "$(basename "$OUT")" 2>/dev/null &&
    mv "$FINAL/all.tgz.part" "$FINAL/all.tgz"; }
# step NAME COMMAND...: runs it under `timeout $STEP_S` (150 s), logs to $OUT/NAME.log, one summary line (exit code,
# seconds; shell arithmetic: the GPU machine has no bc), then publishes.
step() { local name=$1; shift; local t0; t0=$(date +%s%N)
  timeout "${STEP_S:-150}" "$@" > "$OUT/$name.log" 2>&1; local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  printf '%-30s rc=%-4s %4d.%d s\n' "$name" "$rc" $((ms / 1000)) $((ms % 1000 / 100)) | tee -a "$S"; publish; return $rc; }
# The libraries: .gpu/lib, the Python wheels' (cuDNN, NCCL, cuBLAS, runtime), then CUDA's own.
gpu_libraries() {
  local wheel_libs
  wheel_libs=$(python3 - <<'PY' 2>/dev/null
import os, site
dirs = set()
for sp in site.getsitepackages():
    for d, _, files in os.walk(os.path.join(sp, 'nvidia')):
        if any(f.startswith(('libcudnn', 'libnccl', 'libcublas', 'libcudart')) for f in files): dirs.add(d)
print(':'.join(sorted(dirs)))
PY
)
  export LD_LIBRARY_PATH="$PWD/.gpu/lib:${wheel_libs}:/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
}
# Llama 3 8B's layers (h 4096, 32 / 8 heads, SwiGLU 14336, vocabulary 128256) with 2 layers and 2048-token sequences,
# so that its profile takes minutes, not an hour: written to $OUT/models/llama3-8b-2l.yaml.
llama_2l_model() {
  mkdir -p "$OUT/models"
  sed -e 's/^name: llama3-8b/name: llama3-8b-2l/' -e 's/^  layers: 32/  layers: 2/' -e 's/^  seq: 8192/  seq: 2048/' \
    configs/models/llama3-8b.yaml > "$OUT/models/llama3-8b-2l.yaml"
}
