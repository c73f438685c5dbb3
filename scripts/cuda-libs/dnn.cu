// dnn.cu: a cuDNN convolution forward (NCHW, float), checked against the CPU.
#include <cudnn.h>

#include "libcheck.h"

int main() {
  lc_begin("cudnn_conv");
  const int N = 2, C = 3, H = 32, W = 32, K = 8, R = 3, S = 3;  // pad 1, stride 1
  const int OH = H, OW = W;
  size_t xn = (size_t)N * C * H * W, wn = (size_t)K * C * R * S, yn = (size_t)N * K * OH * OW;
  float *x = (float *)malloc(xn * 4), *w = (float *)malloc(wn * 4), *y = (float *)malloc(yn * 4);
  lc_rand(x, (int)xn, 11);
  lc_rand(w, (int)wn, 12);
  float *dx, *dw, *dy;
  CKRT(cudaMalloc(&dx, xn * 4));
  CKRT(cudaMalloc(&dw, wn * 4));
  CKRT(cudaMalloc(&dy, yn * 4));
  CKRT(cudaMemcpy(dx, x, xn * 4, cudaMemcpyHostToDevice));
  CKRT(cudaMemcpy(dw, w, wn * 4, cudaMemcpyHostToDevice));
  cudnnHandle_t h;
  CK(cudnnCreate(&h));
  cudnnTensorDescriptor_t xd, yd;
  cudnnFilterDescriptor_t wd;
  cudnnConvolutionDescriptor_t cd;
  CK(cudnnCreateTensorDescriptor(&xd));
  CK(cudnnCreateTensorDescriptor(&yd));
  CK(cudnnCreateFilterDescriptor(&wd));
  CK(cudnnCreateConvolutionDescriptor(&cd));
  CK(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, C, H, W));
  CK(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, K, C, R, S));
  CK(cudnnSetConvolution2dDescriptor(cd, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT));
  CK(cudnnSetConvolutionMathType(cd, CUDNN_FMA_MATH));  // no TF32
  int on, oc, oh, ow;
  CK(cudnnGetConvolution2dForwardOutputDim(cd, xd, wd, &on, &oc, &oh, &ow));
  if (on != N || oc != K || oh != OH || ow != OW) lc_die("output dims %d %d %d %d", on, oc, oh, ow);
  CK(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, N, K, OH, OW));
  cudnnConvolutionFwdAlgoPerf_t perf[8];
  int got = 0;
  CK(cudnnGetConvolutionForwardAlgorithm_v7(h, xd, wd, cd, yd, 8, &got, perf));
  if (!got) lc_die("no forward algorithm");
  size_t ws = 0;
  CK(cudnnGetConvolutionForwardWorkspaceSize(h, xd, wd, cd, yd, perf[0].algo, &ws));
  void *dws = NULL;
  CKRT(cudaMalloc(&dws, ws > 0 ? ws : 1));
  float one = 1, zero = 0;
  CK(cudnnConvolutionForward(h, &one, xd, dx, wd, dw, cd, perf[0].algo, dws, ws, &zero, yd, dy));
  CKRT(cudaMemcpy(y, dy, yn * 4, cudaMemcpyDeviceToHost));
  for (int n = 0; n < N; n++)
    for (int k = 0; k < K; k++)
      for (int i = 0; i < OH; i += 5)
        for (int j = 0; j < OW; j += 7) {
          double s = 0;
          for (int c = 0; c < C; c++)
            for (int r = 0; r < R; r++)
              for (int t = 0; t < S; t++) {
                int yi = i + r - 1, xj = j + t - 1;
                if (yi < 0 || yi >= H || xj < 0 || xj >= W) continue;
                s += (double)x[((n * C + c) * H + yi) * W + xj] * w[((k * C + c) * R + r) * S + t];
              }
          lc_close("conv", ((n * K + k) * OH + i) * OW + j, y[((n * K + k) * OH + i) * OW + j], s, 1e-4);
        }
  CK(cudnnDestroy(h));
  return lc_end();
}
