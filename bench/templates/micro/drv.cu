// drv MODE ROWS COLS ./lib.so...: times kb_forward of native-ABI libraries
// (built-in template points) on [ROWS, COLS] fp32 inputs; CUDA events,
// median of 60 calls, L2 flushed before each call by writing 256 MB
// (RFLUSH=1: by reading it; see bench/results/micro-rowwise-flush-*.txt).
//   ce: cross_entropy(logits [R, C], int64 targets [R]) -> scalar
//   pw: f(x [R, C], bias [C]) -> [R, C]           (pointwise chains)
//   ln: f(x [R, C], weight [C], bias [C]) -> [R, C] (layer_norm)
// Prints time, bandwidth (bytes read once + written once), share of a
// cudaMemcpy of x in the same run, and the largest difference from the
// first library's output.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>
#include "kernelbot_abi.h"

typedef int (*fwd_t)(const DLTensor *, int, DLTensor *, int, void *);

__global__ void fill(float *x, int64_t n, uint32_t seed)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		uint32_t h = (uint32_t)i * 2654435761u ^ seed;
		h ^= h >> 13; h *= 0x5bd1e995; h ^= h >> 15;
		x[i] = ((h & 0xffffff) / 16777216.0f - 0.5f) * 8.0f;
	}
}

__global__ void fill_targets(int64_t *t, int64_t n, int64_t C)
{
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x)
		t[i] = (i * 7919) % C;
}

__global__ void readsum(const float4 *x, int64_t n, float *out)
{
	float s = 0;
	for (int64_t i = blockIdx.x * (int64_t)blockDim.x + threadIdx.x; i < n; i += (int64_t)gridDim.x * blockDim.x) {
		float4 v = x[i];
		s += v.x + v.y + v.z + v.w;
	}
	if (s == 123.456f) /* never: keeps the loads */
		*out = s;
}

static void tensor(DLTensor *t, void *data, int ndim, int64_t *shape, uint8_t code)
{
	memset(t, 0, sizeof(*t));
	t->data = data;
	t->ndim = ndim;
	t->shape = shape;
	t->dtype.code = code;
	t->dtype.bits = code == kDLInt ? 64 : 32;
	t->dtype.lanes = 1;
	t->device.device_type = kDLCUDA;
}

int main(int argc, char **argv)
{
	if (argc < 5 || (strcmp(argv[1], "ce") && strcmp(argv[1], "pw") && strcmp(argv[1], "ln"))) {
		fprintf(stderr, "usage: drv ce|pw|ln ROWS COLS ./lib.so...\n");
		return 2;
	}
	const char *mode = argv[1];
	const int64_t R = atoll(argv[2]), C = atoll(argv[3]), n = R * C;
	const bool ce = !strcmp(mode, "ce");
	const int64_t ny = ce ? 1 : n;
	const size_t flush_bytes = (size_t)256 << 20;
	float *x, *w, *bias, *y, *flush, *copy;
	int64_t *tgt;

	cudaMalloc(&x, n * 4); cudaMalloc(&copy, n * 4); cudaMalloc(&y, ny * 4 + 64);
	cudaMalloc(&w, C * 4); cudaMalloc(&bias, C * 4); cudaMalloc(&tgt, R * 8); cudaMalloc(&flush, flush_bytes);
	fill<<<1024, 256>>>(x, n, 1); fill<<<64, 256>>>(bias, C, 2); fill<<<64, 256>>>(w, C, 3);
	fill_targets<<<64, 256>>>(tgt, R, C);
	if (cudaDeviceSynchronize() != cudaSuccess) {
		fprintf(stderr, "drv: %s\n", cudaGetErrorString(cudaGetLastError()));
		return 1;
	}
	const bool rflush = getenv("RFLUSH") != NULL;
	cudaEvent_t a, b;
	cudaStream_t s;
	cudaEventCreate(&a); cudaEventCreate(&b); cudaStreamCreate(&s);
	auto timeit = [&](auto fn) {
		std::vector<float> v;
		for (int k = 0; k < 5; k++)
			fn();
		for (int k = 0; k < 60; k++) {
			if (rflush)
				readsum<<<132 * 8, 512, 0, s>>>((const float4 *)flush, flush_bytes / 16, y + ny);
			else
				cudaMemsetAsync(flush, k, flush_bytes, s);
			cudaEventRecord(a, s);
			fn();
			cudaEventRecord(b, s);
			cudaEventSynchronize(b);
			float ms;
			cudaEventElapsedTime(&ms, a, b);
			v.push_back(ms);
		}
		std::sort(v.begin(), v.end());
		return v[v.size() / 2];
	};
	const double bytes = (double)n * 4 * (ce ? 1 : 2);
	const float tc = timeit([&] { cudaMemcpyAsync(copy, x, n * 4, cudaMemcpyDeviceToDevice, s); });
	const float tr = timeit([&] { readsum<<<132 * 8, 512, 0, s>>>((const float4 *)x, n / 4, y + ny); });
	printf("%s %lldx%lld  copy %.4f ms %.0f GB/s   read %.4f ms %.0f GB/s   %s flush\n", mode, (long long)R,
	       (long long)C, tc, 2.0 * n * 4 / tc / 1e6, tr, n * 4.0 / tr / 1e6, rflush ? "read" : "written");

	int64_t xs[2] = { R, C }, cs[1] = { C }, rs[1] = { R };
	DLTensor in[3], out[1];
	int nin;
	tensor(&in[0], x, 2, xs, kDLFloat);
	if (ce) {
		tensor(&in[1], tgt, 1, rs, kDLInt);
		tensor(&out[0], y, 0, rs, kDLFloat);
		nin = 2;
	} else if (!strcmp(mode, "pw")) {
		tensor(&in[1], bias, 1, cs, kDLFloat);
		tensor(&out[0], y, 2, xs, kDLFloat);
		nin = 2;
	} else {
		tensor(&in[1], w, 1, cs, kDLFloat);
		tensor(&in[2], bias, 1, cs, kDLFloat);
		tensor(&out[0], y, 2, xs, kDLFloat);
		nin = 3;
	}
	std::vector<float> ref(ny), cur(ny);
	for (int i = 4; i < argc; i++) {
		void *h = dlopen(argv[i], RTLD_NOW | RTLD_LOCAL);
		if (!h) {
			printf("  %s: %s\n", argv[i], dlerror());
			continue;
		}
		fwd_t f = (fwd_t)dlsym(h, "kb_forward");
		int rc = 0;
		const float tk = timeit([&] { rc |= f(in, nin, out, 1, s); });
		cudaMemcpy(i == 4 ? ref.data() : cur.data(), y, ny * 4, cudaMemcpyDeviceToHost);
		double md = 0;
		for (int64_t k = 0; i > 4 && k < ny; k++)
			md = fmax(md, fabs((double)cur[k] - ref[k]));
		printf("  %-32s %.4f ms %6.0f GB/s %5.1f%% copy  rc %d  maxdiff %.3g  %s\n", argv[i], tk,
		       bytes / tk / 1e6, 100.0 * (bytes / tk) / (2.0 * n * 4 / tc), rc, md,
		       cudaGetErrorString(cudaGetLastError()));
	}
	return 0;
}
