// Which cuBLASLt FP8 (e4m3 x e4m3, TN, per-tensor scales) configurations this device and library run
// (docs/gpu.md: the device check's FP8 diagnosis). Prints one line per (C / D type, beta, heuristic) with
// cublasLtMatmul's status and the result's relative error against a host fp32 product of the same e4m3 values.
//   nvcc -O2 -arch=sm_90 tools/gpu/fp8_probe.cu -lcublasLt -o fp8_probe && ./fp8_probe
#include <cublasLt.h>
#include <cuda_bf16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdio>
#include <vector>

static int Run(cudaDataType_t cd_type, float beta, int m, int n, int k, int8_t fast, bool in_place) {
  cublasLtHandle_t h;
  cublasLtCreate(&h);
  std::vector<__nv_fp8_e4m3> ha(size_t(m) * k), hb(size_t(n) * k);
  std::vector<float> fa(ha.size()), fb(hb.size());
  for (size_t i = 0; i < ha.size(); ++i) ha[i] = __nv_fp8_e4m3(float((i * 7) % 13) / 4 - 1.5f), fa[i] = float(ha[i]);
  for (size_t i = 0; i < hb.size(); ++i) hb[i] = __nv_fp8_e4m3(float((i * 5) % 11) / 4 - 1.25f), fb[i] = float(hb[i]);
  void *da, *db, *dd, *ws;
  float* sc;
  const size_t esz = cd_type == CUDA_R_32F ? 4 : 2, wsb = size_t(32) << 20;
  cudaMalloc(&da, ha.size());
  cudaMalloc(&db, hb.size());
  cudaMalloc(&dd, size_t(m) * n * esz);
  cudaMalloc(&ws, wsb);
  cudaMalloc(&sc, 8);
  cudaMemcpy(da, ha.data(), ha.size(), cudaMemcpyHostToDevice);
  cudaMemcpy(db, hb.data(), hb.size(), cudaMemcpyHostToDevice);
  cudaMemset(dd, 0, size_t(m) * n * esz);
  float ones[2] = {1, 1};
  cudaMemcpy(sc, ones, 8, cudaMemcpyHostToDevice);
  cublasLtMatmulDesc_t op;
  cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F);
  cublasOperation_t t = CUBLAS_OP_T, nn = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &t, sizeof t);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &nn, sizeof nn);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof fast);
  const float* s0 = sc;
  const float* s1 = sc + 1;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &s0, sizeof s0);
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &s1, sizeof s1);
  cublasLtMatrixLayout_t la, lb, lc;
  cublasLtMatrixLayoutCreate(&la, CUDA_R_8F_E4M3, k, m, k);  // Lt's A: k x m stored, transposed: m x k
  cublasLtMatrixLayoutCreate(&lb, CUDA_R_8F_E4M3, k, n, k);
  cublasLtMatrixLayoutCreate(&lc, cd_type, m, n, m);
  cublasLtMatmulPreference_t pref;
  cublasLtMatmulPreferenceCreate(&pref);
  cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof wsb);
  cublasLtMatmulHeuristicResult_t res[8] = {};
  int found = 0;
  cublasStatus_t hs = cublasLtMatmulAlgoGetHeuristic(h, op, la, lb, lc, lc, pref, 8, res, &found);
  const char* tn = cd_type == CUDA_R_32F ? "fp32" : "bf16";
  std::printf("fp8_probe %s C/D %s beta=%g fast_accum=%d m=%d n=%d k=%d heuristic status %d, %d algorithms\n",
              in_place ? "in place (C = D)" : "out of place", tn, beta, int(fast), m, n, k, int(hs), found);
  int ok = 0;
  for (int i = 0; i < found; ++i) {
    const float alpha = 1;
    cublasStatus_t s = cublasLtMatmul(h, op, &alpha, da, la, db, lb, &beta, in_place ? dd : da, lc, dd, lc, &res[i].algo,
                                      ws, wsb, 0);
    cudaError_t ce = cudaDeviceSynchronize();
    double err = -1;
    if (s == CUBLAS_STATUS_SUCCESS && ce == cudaSuccess) {
      std::vector<float> out(size_t(m) * n);
      if (cd_type == CUDA_R_32F) {
        cudaMemcpy(out.data(), dd, out.size() * 4, cudaMemcpyDeviceToHost);
      } else {
        std::vector<__nv_bfloat16> o16(out.size());
        cudaMemcpy(o16.data(), dd, o16.size() * 2, cudaMemcpyDeviceToHost);
        for (size_t j = 0; j < out.size(); ++j) out[j] = __bfloat162float(o16[j]);
      }
      double num = 0, den = 0;
      for (int c = 0; c < n; ++c)
        for (int r = 0; r < m; ++r) {
          double ref = 0;
          for (int p = 0; p < k; ++p) ref += double(fa[size_t(r) * k + p]) * fb[size_t(c) * k + p];
          double d = out[size_t(c) * m + r] - ref;  // an in-place beta-1 run starts from a zero output
          num += d * d, den += ref * ref;
        }
      err = std::sqrt(num / (den > 0 ? den : 1));
      ok += err < 1e-2;
    }
    std::printf("fp8_probe   algorithm %d: matmul status %d, cuda %s, workspace %zu B, relative L2 %.3g\n", i, int(s),
                cudaGetErrorString(ce), res[i].workspaceSize, err);
  }
  cublasLtDestroy(h);
  return ok;
}

int main() {
  int ver = 0;
  cudaRuntimeGetVersion(&ver);
  std::printf("fp8_probe cuBLASLt %zu, CUDA runtime %d\n", cublasLtGetVersion(), ver);
  int ok = 0;
  // In place is what the runtime did before 2026-11-30 (every algorithm refused, status 15, on an H200 with
  // cuBLASLt 13.1); out of place at beta 0 is what PyTorch's _scaled_mm does and what the runtime does now.
  for (bool in_place : {true, false})
    for (cudaDataType_t t : {CUDA_R_32F, CUDA_R_16BF})
      for (int8_t fast : {0, 1}) ok += Run(t, 0.0f, 64, 48, 96, fast, in_place);
  ok += Run(CUDA_R_32F, 0.0f, 256, 48, 96, 0, false);
  std::printf("fp8_probe %d configurations ran correctly\n", ok);
  return ok > 0 ? 0 : 1;
}
