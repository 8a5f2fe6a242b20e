#include "core/common.h"
#include "core/strbuf.h"
#include "core/util.h"
#include "search/behavior.h"
#include "search/extract.h"

#include <dirent.h>
#include <setjmp.h>
#include <cmocka.h>

static struct kb_behavior b;

static void score(const char *src, enum kb_backend be)
{
	kb_behavior_score(src, be, &b);
}

/* Expect memory/compute/parallel levels (-1: do not care); print why on failure. */
static void expect(const char *src, enum kb_backend be, int m, int c, int p)
{
	score(src, be);
	if ((m >= 0 && b.memory != m) || (c >= 0 && b.compute != c) || (p >= 0 && b.parallel != p))
		fprintf(stderr, "expected %d%d%d got %d%d%d (%s) for:\n%s\n", m, c, p, b.memory, b.compute,
			b.parallel, b.why, src);
	if (m >= 0)
		assert_int_equal(b.memory, m);
	if (c >= 0)
		assert_int_equal(b.compute, c);
	if (p >= 0)
		assert_int_equal(b.parallel, p);
}

static void why_has(const char *needle)
{
	if (!strstr(b.why, needle))
		fprintf(stderr, "why '%s' lacks '%s'\n", b.why, needle);
	assert_non_null(strstr(b.why, needle));
}

#define CU KB_BACKEND_CUDA
#define CPU KB_BACKEND_CPU

#define LAUNCH1(k) \
	"int kb_forward(const DLTensor *in, int ni, DLTensor *out, int no, void *s)\n" \
	"{\n\t" k "<<<64, 256, 0, (cudaStream_t)s>>>((const float *)in[0].data, (float *)out[0].data, 1024);\n" \
	"\treturn 0;\n}\n"

/* --- CUDA: memory --- */

static const char naive_cu[] =
	"__global__ void scale(const float *x, float *y, int n)\n"
	"{\n"
	"\tint i = blockIdx.x * blockDim.x + threadIdx.x;\n"
	"\tif (i < n)\n"
	"\t\ty[i] = 2.0f * x[i];\n"
	"}\n" LAUNCH1("scale");

static void test_cuda_naive(void **state)
{
	expect(naive_cu, CU, 0, 1, 0);
	why_has("memory 0");
	why_has("compute 1: one kernel scale");
	why_has("parallel 0");
	/* auto means cuda */
	kb_behavior_score(naive_cu, KB_BACKEND_AUTO, &b);
	assert_int_equal(kb_behavior_cell(&b), 0 * 16 + 1 * 4 + 0);
}

static void test_cuda_memory_vector(void **state)
{
	expect("__global__ void k(const float4 *x, float4 *y, int n)\n"
	       "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) { float4 v = x[i]; v.x *= 2; y[i] = v; } }\n"
	       LAUNCH1("k"), CU, 1, 1, 0);
	why_has("float4");
	expect("__global__ void k(const float *x, float *y, int n)\n"
	       "{ int i = threadIdx.x; y[i] = __ldg(&x[i]); }\n" LAUNCH1("k"), CU, 1, 1, 0);
	why_has("__ldg");
	expect("__global__ void k(const __half *x, __half *y, int n)\n"
	       "{ int i = threadIdx.x; const __half2 *x2 = reinterpret_cast<const __half2 *>(x);\n"
	       "  reinterpret_cast<__half2 *>(y)[i] = x2[i]; }\n" LAUNCH1("k"), CU, 1, 1, 0);
	/* float4 only in a comment or in a string: naive */
	expect("__global__ void k(const float *x, float *y, int n)\n"
	       "{ /* could use float4 and __ldg here */ int i = threadIdx.x; // float4\n"
	       "  if (i == 0) printf(\"float4 __ldg\\n\"); y[i] = x[i]; }\n" LAUNCH1("k"), CU, 0, 1, 0);
	/* identifier boundaries: my_float4 or float4x are not float4 */
	expect("__global__ void k(const float *x, float *y, int n)\n"
	       "{ int my_float4 = 1, float4x = 2; y[threadIdx.x] = x[threadIdx.x] * my_float4 * float4x; }\n"
	       LAUNCH1("k"), CU, 0, 1, 0);
}

static const char tile_cu[] =
	"#define T 16\n"
	"__global__ void mm(const float *A, const float *B, float *C, int n)\n"
	"{\n"
	"\t__shared__ float As[T][T + 1], Bs[T][T];\n"
	"\tint tx = threadIdx.x, ty = threadIdx.y, row = blockIdx.y * T + ty, col = blockIdx.x * T + tx;\n"
	"\tfloat acc = 0.0f;\n"
	"\tfor (int k0 = 0; k0 < n; k0 += T) {\n"
	"\t\tAs[ty][tx] = A[row * n + k0 + tx];\n"
	"\t\tBs[ty][tx] = B[(k0 + ty) * n + col];\n"
	"\t\t__syncthreads();\n"
	"\t\tfor (int k = 0; k < T; k++)\n"
	"\t\t\tacc += As[ty][k] * Bs[k][tx];\n"
	"\t\t__syncthreads();\n"
	"\t}\n"
	"\tC[row * n + col] = acc;\n"
	"}\n" LAUNCH1("mm");

static void test_cuda_memory_shared(void **state)
{
	expect(tile_cu, CU, 2, 1, 1);
	why_has("__shared__ tile As[][]");
	why_has("__syncthreads");
	/* 1-D shared staging of a global pointer (a derived pointer too) */
	expect("__global__ void k(const float *__restrict__ x, float *y, int n)\n"
	       "{ __shared__ float buf[256]; const float *xr = x + blockIdx.x * 256;\n"
	       "  buf[threadIdx.x] = xr[threadIdx.x]; __syncthreads();\n"
	       "  y[threadIdx.x] = buf[255 - threadIdx.x]; }\n" LAUNCH1("k"), CU, 2, 1, 1);
	why_has("staged in __shared__ buf");
	/* dynamic shared memory filled from global */
	expect("__global__ void k(const float *x, float *y, int n)\n"
	       "{ extern __shared__ float sm[]; sm[threadIdx.x] = x[threadIdx.x]; __syncthreads();\n"
	       "  y[threadIdx.x] = sm[0]; }\n" LAUNCH1("k"), CU, 2, 1, 1);
	/* a 1-D reduction scratch filled from registers is not a tile */
	expect("__global__ void k(const float *x, float *y, int n)\n"
	       "{ __shared__ float part[8]; float v = x[threadIdx.x] * 2.0f;\n"
	       "  part[threadIdx.x / 32] = v; __syncthreads(); if (threadIdx.x == 0) y[blockIdx.x] = part[0]; }\n"
	       LAUNCH1("k"), CU, 0, 1, 1);
	/* __shared__ in a comment does not count */
	expect("__global__ void k(const float *x, float *y, int n)\n"
	       "{ // __shared__ float t[16][16];\n y[threadIdx.x] = x[threadIdx.x]; }\n" LAUNCH1("k"), CU, 0, 1, 0);
}

static void test_cuda_memory_async(void **state)
{
	static const char cp[] =
		"__device__ void cp16(void *s, const void *g)\n"
		"{\n"
		"\tunsigned a = (unsigned)__cvta_generic_to_shared(s);\n"
		"\tasm volatile(\"cp.async.cg.shared.global [%0], [%1], 16;\\n\" :: \"r\"(a), \"l\"(g));\n"
		"}\n"
		"__global__ void k(const float4 *x, float4 *y)\n"
		"{\n"
		"\t__shared__ float4 t[2][128];\n"
		"\tcp16(&t[0][threadIdx.x], &x[threadIdx.x]);\n"
		"\tasm volatile(\"cp.async.wait_all;\\n\" ::);\n"
		"\t__syncthreads();\n"
		"\ty[threadIdx.x] = t[0][threadIdx.x];\n"
		"}\n" LAUNCH1("k");

	expect(cp, CU, 3, 1, 1);
	why_has("memory 3: cp.async");
	why_has("2: __shared__ tile t[][]");
	why_has("1: vector type float4");
	/* the C++ API */
	expect("#include <cuda/pipeline>\n"
	       "__global__ void k(const float *x, float *y)\n"
	       "{ __shared__ float t[4][64]; auto g = cooperative_groups::this_thread_block();\n"
	       "  cooperative_groups::memcpy_async(g, &t[0][0], x, sizeof(float) * 256);\n"
	       "  cooperative_groups::wait(g); y[threadIdx.x] = t[0][threadIdx.x]; }\n" LAUNCH1("k"), CU, 3, 1, 1);
	why_has("memcpy_async");
	/* cp.async written in a printf string or in a comment: naive */
	expect("__global__ void k(const float *x, float *y)\n"
	       "{ /* asm(\"cp.async.cg.shared.global\") */ if (!threadIdx.x) printf(\"cp.async ldmatrix\");\n"
	       "  y[threadIdx.x] = x[threadIdx.x]; }\n" LAUNCH1("k"), CU, 0, 1, 0);
	/* ldmatrix in asm */
	expect("__global__ void k(const float *x, float *y)\n"
	       "{ unsigned r0, a = 0; asm volatile(\"ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];\" : \"=r\"(r0) : \"r\"(a));\n"
	       "  y[threadIdx.x] = x[threadIdx.x] + r0; }\n" LAUNCH1("k"), CU, 3, 1, 0);
}

static void test_cuda_register_tile_and_tiled(void **state)
{
	static const char rt[] =
		"#define TM 4\n#define TN 4\n#define BK 8\n"
		"__global__ void g(const float *A, const float *B, float *C, int M, int N, int K)\n"
		"{\n"
		"\t__shared__ float as[BK][64], bs[BK][64];\n"
		"\tfloat acc[TM][TN] = {};\n"
		"\tfor (int k0 = 0; k0 < K; k0 += BK) {\n"
		"\t\tas[threadIdx.y][threadIdx.x] = A[k0 + threadIdx.x];\n"
		"\t\tbs[threadIdx.y][threadIdx.x] = B[k0 + threadIdx.x];\n"
		"\t\t__syncthreads();\n"
		"#pragma unroll\n"
		"\t\tfor (int k = 0; k < BK; k++)\n"
		"\t\t\tfor (int i = 0; i < TM; i++)\n"
		"\t\t\t\tfor (int j = 0; j < TN; j++)\n"
		"\t\t\t\t\tacc[i][j] = fmaf(as[k][i], bs[k][j], acc[i][j]);\n"
		"\t\t__syncthreads();\n"
		"\t}\n"
		"\tfor (int i = 0; i < TM; i++)\n"
		"\t\tfor (int j = 0; j < TN; j++)\n"
		"\t\t\tC[i * N + j] = acc[i][j];\n"
		"}\n" LAUNCH1("g");

	expect(rt, CU, 3, 3, 1);
	why_has("register tile acc[][]");
	why_has("tiled");
	why_has("1: one kernel g");
	/* a 2-D register array that is only loaded: register tile (memory 3), but no tiled compute */
	expect("__global__ void k(const float *x, float *y)\n"
	       "{ float v[4][2]; for (int i = 0; i < 4; i++) { v[i][0] = x[i]; v[i][1] = x[i + 4]; }\n"
	       "  y[threadIdx.x] = v[1][0] + v[2][1]; }\n" LAUNCH1("k"), CU, 3, 1, 0);
	/* a 2-D array in host code is not a register tile */
	expect("static void host_table(float *t) { float tab[4][4]; tab[0][0] = 1; t[0] = tab[0][0]; }\n"
	       "__global__ void k(const float *x, float *y) { y[threadIdx.x] = x[threadIdx.x]; }\n"
	       LAUNCH1("k"), CU, 0, 1, 0);
}

/* --- CUDA: compute --- */

static void test_cuda_compute_passes(void **state)
{
	static const char two[] =
		"__global__ void square(const float *x, float *t, int n) { int i = threadIdx.x; t[i] = x[i] * x[i]; }\n"
		"__global__ void add1(const float *t, float *y, int n) { int i = threadIdx.x; y[i] = t[i] + 1; }\n"
		"int kb_forward(const DLTensor *in, int ni, DLTensor *out, int no, void *s)\n"
		"{\n"
		"\tsquare<<<1, 256, 0, (cudaStream_t)s>>>((const float *)in[0].data, tmp, 256);\n"
		"\tadd1<<<1, 256, 0, (cudaStream_t)s>>>(tmp, (float *)out[0].data, 256);\n"
		"\treturn 0;\n"
		"}\n";
	static const char alt[] =
		"__global__ void vec(const float4 *x, float4 *y, int n) { int i = threadIdx.x; y[i] = x[i]; }\n"
		"__global__ void sca(const float *x, float *y, int n) { int i = threadIdx.x; y[i] = x[i]; }\n"
		"int kb_forward(const DLTensor *in, int ni, DLTensor *out, int no, void *s)\n"
		"{\n"
		"\tif (aligned(in))\n"
		"\t\tvec<<<1, 256>>>((const float4 *)in[0].data, (float4 *)out[0].data, 64);\n"
		"\telse\n"
		"\t\tsca<<<1, 256>>>((const float *)in[0].data, (float *)out[0].data, 256);\n"
		"\treturn 0;\n"
		"}\n";
	static const char early[] =
		"__global__ void a(float *y) { y[threadIdx.x] = 1; }\n"
		"__global__ void b(float *y) { y[threadIdx.x] = 2; }\n"
		"int kb_forward(const DLTensor *in, int ni, DLTensor *out, int no, void *s)\n"
		"{\n"
		"\tif (ni == 1) {\n\t\ta<<<1, 32>>>((float *)out[0].data);\n\t\treturn 0;\n\t}\n"
		"\tb<<<1, 32>>>((float *)out[0].data);\n"
		"\treturn 0;\n"
		"}\n";
	static const char same_twice[] =
		"__global__ void pass(float *y, int n) { y[threadIdx.x] += 1; }\n"
		"int kb_forward(const DLTensor *in, int ni, DLTensor *out, int no, void *s)\n"
		"{ pass<<<1, 32>>>((float *)out[0].data, 1); pass<<<1, 32>>>((float *)out[0].data, 1); return 0; }\n";
	static const char looped[] =
		"__global__ void step(float *y, int n) { y[threadIdx.x] *= 0.5f; }\n"
		"int kb_forward(const DLTensor *in, int ni, DLTensor *out, int no, void *s)\n"
		"{ for (int it = 0; it < 10; it++)\n\t\tstep<<<1, 32>>>((float *)out[0].data, 1);\n return 0; }\n";
	static const char in_kernel[] =
		"__global__ void ln(const float *x, float *y, int cols)\n"
		"{\n"
		"\tfloat s = 0;\n"
		"\tfor (int j = threadIdx.x; j < cols; j += 32)\n"
		"\t\ts += x[j];\n"
		"\tfor (int j = threadIdx.x; j < cols; j += 32)\n"
		"\t\ty[j] = x[j] - s;\n"
		"}\n" LAUNCH1("ln");

	expect(two, CU, 0, 0, 0);
	why_has("compute 0: kernels launched in sequence");
	expect(alt, CU, 1, 1, 0);
	why_has("one kernel per call");
	expect(early, CU, 0, 1, 0);
	expect(same_twice, CU, 0, 0, 0);
	expect(looped, CU, 0, 0, 0);
	why_has("launched in a loop");
	expect(in_kernel, CU, 0, 0, 0);
	why_has("two passes over j<cols");
	/* no kernel at all: nothing to call fused */
	expect("int kb_forward(const DLTensor *in, int ni, DLTensor *out, int no, void *s) { return 2; }\n",
	       CU, 0, 0, 0);
}

static const char online_cu[] =
	"__global__ void softmax(const float *x, float *y, int cols)\n"
	"{\n"
	"\tfloat m = -INFINITY, s = 0.0f;\n"
	"\tfor (int j = threadIdx.x; j < cols; j += blockDim.x) {\n"
	"\t\tfloat v = x[j];\n"
	"\t\tif (v > m) {\n"
	"\t\t\ts *= __expf(m - v);\n"
	"\t\t\tm = v;\n"
	"\t\t}\n"
	"\t\ts += __expf(v - m);\n"
	"\t}\n"
	"\tfor (int o = 16; o > 0; o >>= 1) {\n"
	"\t\tfloat m2 = __shfl_down_sync(0xffffffffu, m, o), s2 = __shfl_down_sync(0xffffffffu, s, o);\n"
	"\t\tfloat mm = fmaxf(m, m2);\n"
	"\t\ts = s * __expf(m - mm) + s2 * __expf(m2 - mm);\n"
	"\t\tm = mm;\n"
	"\t}\n"
	"\ty[blockIdx.x] = s;\n"
	"}\n" LAUNCH1("softmax");

static void test_cuda_compute_online(void **state)
{
	expect(online_cu, CU, 0, 2, 2);
	why_has("compute 2: running rescale");
	why_has("parallel 2: __shfl_down_sync");
	/* flash-style: a rescale factor multiplied in */
	expect("__global__ void attn(const float *x, float *y, int n)\n"
	       "{ float m = -1e30f, l = 0.0f, acc = 0.0f;\n"
	       "  for (int j = 0; j < n; j++) {\n"
	       "    float mn = fmaxf(m, x[j]);\n"
	       "    float scale = expf(m - mn);\n"
	       "    float p = expf(x[j] - mn);\n"
	       "    l = l * scale + p;\n"
	       "    acc = acc * scale + p * x[j];\n"
	       "    m = mn;\n"
	       "  }\n"
	       "  y[0] = acc / l; }\n" LAUNCH1("attn"), CU, 0, 2, 0);
	/* Welford */
	expect("struct welford_t { float mean, m2, n; };\n"
	       "__device__ void welford_add(welford_t &w, float x) { w.n += 1; float d = x - w.mean; w.mean += d / w.n; w.m2 += d * (x - w.mean); }\n"
	       "__global__ void k(const float *x, float *y) { welford_t w = {0, 0, 0}; welford_add(w, x[threadIdx.x]); y[0] = w.m2; }\n"
	       LAUNCH1("k"), CU, 0, 2, 0);
	why_has("Welford");
	/* a plain (three-pass) softmax is not online: exp(x - m) / s is no rescale */
	expect("__global__ void sm(const float *x, float *y, int n)\n"
	       "{ float m = -1e30f, s = 0; for (int j = 0; j < n; j++) m = fmaxf(m, x[j]);\n"
	       "  for (int j = 0; j < n; j++) s += expf(x[j] - m);\n"
	       "  for (int j = 0; j < n; j++) y[j] = expf(x[j] - m) / s; }\n" LAUNCH1("sm"), CU, 0, 0, 0);
	/* the online pattern only in a comment: not online */
	expect("__global__ void sm(const float *x, float *y, int n)\n"
	       "{ /* s *= expf(m - v); */ y[threadIdx.x] = expf(x[threadIdx.x]); }\n" LAUNCH1("sm"), CU, 0, 1, 0);
}

static void test_cuda_compute_tensor_cores(void **state)
{
	static const char wmma[] =
		"#include <mma.h>\n"
		"using namespace nvcuda;\n"
		"__global__ void hgemm(const half *a, const half *b, float *c, int n)\n"
		"{\n"
		"\twmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa;\n"
		"\twmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb;\n"
		"\twmma::fragment<wmma::accumulator, 16, 16, 16, float> fc;\n"
		"\twmma::fill_fragment(fc, 0.0f);\n"
		"\tfor (int k = 0; k < n; k += 16) {\n"
		"\t\twmma::load_matrix_sync(fa, a + k, n);\n"
		"\t\twmma::load_matrix_sync(fb, b + k, n);\n"
		"\t\twmma::mma_sync(fc, fa, fb, fc);\n"
		"\t}\n"
		"\twmma::store_matrix_sync(c, fc, n, wmma::mem_row_major);\n"
		"}\n" LAUNCH1("hgemm");

	expect(wmma, CU, -1, 3, 0);
	why_has("tensor cores (wmma)");
	expect("__global__ void k(float *d, const unsigned *a, const unsigned *b)\n"
	       "{ float c0 = 0, c1 = 0, c2 = 0, c3 = 0;\n"
	       "  asm volatile(\"mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\"\n"
	       "    : \"+f\"(c0), \"+f\"(c1), \"+f\"(c2), \"+f\"(c3) : \"r\"(a[0]), \"r\"(a[1]), \"r\"(a[2]), \"r\"(a[3]), \"r\"(b[0]), \"r\"(b[1]));\n"
	       "  d[threadIdx.x] = c0 + c1 + c2 + c3; }\n" LAUNCH1("k"), CU, -1, 3, -1);
	why_has("mma.sync");
	/* wmma named only in a comment and a string */
	expect("__global__ void k(const float *x, float *y) { // wmma::mma_sync would be faster\n"
	       "  if (!threadIdx.x) printf(\"wmma mma_sync\"); y[threadIdx.x] = x[threadIdx.x]; }\n" LAUNCH1("k"),
	       CU, 0, 1, 0);
}

/* --- CUDA: parallelism --- */

static void test_cuda_parallel(void **state)
{
	/* block barrier */
	expect(tile_cu, CU, -1, -1, 1);
	/* warp shuffle reduction */
	expect("__global__ void red(const float *x, float *y, int n)\n"
	       "{ float v = x[threadIdx.x];\n"
	       "  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffff, v, o);\n"
	       "  if ((threadIdx.x & 31) == 0) y[threadIdx.x >> 5] = v; }\n" LAUNCH1("red"), CU, 0, 1, 2);
	why_has("__shfl_down_sync");
	/* cooperative groups tiles */
	expect("__global__ void red(const float *x, float *y)\n"
	       "{ auto t = cooperative_groups::tiled_partition<32>(cooperative_groups::this_thread_block());\n"
	       "  y[0] = cooperative_groups::reduce(t, x[threadIdx.x], cooperative_groups::plus<float>()); }\n"
	       LAUNCH1("red"), CU, 0, 1, 2);
	/* atomics across blocks on top of warp shuffles: hierarchical */
	static const char hier[] =
		"__global__ void sum(const float *x, float *out, int n)\n"
		"{\n"
		"\t__shared__ float part[32];\n"
		"\tfloat v = 0;\n"
		"\tfor (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)\n"
		"\t\tv += x[i];\n"
		"\tfor (int o = 16; o > 0; o >>= 1)\n"
		"\t\tv += __shfl_xor_sync(0xffffffffu, v, o);\n"
		"\tif ((threadIdx.x & 31) == 0)\n"
		"\t\tpart[threadIdx.x >> 5] = v;\n"
		"\t__syncthreads();\n"
		"\tif (threadIdx.x == 0)\n"
		"\t\tatomicAdd(out, part[0] + part[1]);\n"
		"}\n" LAUNCH1("sum");

	expect(hier, CU, 0, 1, 3);
	why_has("parallel 3: atomicAdd across blocks + warp");
	why_has("2: __shfl_xor_sync");
	why_has("1: __syncthreads");
	/* atomics alone (one per element): thread level */
	expect("__global__ void hist(const int *x, int *h, int n)\n"
	       "{ int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) atomicAdd(&h[x[i]], 1); }\n"
	       LAUNCH1("hist"), CU, 0, 1, 0);
	/* block-scoped atomics are not across blocks */
	expect("__global__ void k(const float *x, float *y)\n"
	       "{ __syncthreads(); atomicAdd_block(y, x[threadIdx.x]); }\n" LAUNCH1("k"), CU, 0, 1, 1);
	/* grid sync */
	expect("__global__ void k(float *y)\n"
	       "{ cooperative_groups::grid_group g = cooperative_groups::this_grid(); y[threadIdx.x] = 1; g.sync(); }\n"
	       LAUNCH1("k"), CU, 0, 1, 3);
	why_has("grid sync");
	/* barriers and shuffles only in comments and strings */
	expect("__global__ void k(const float *x, float *y)\n"
	       "{ /* __syncthreads(); __shfl_down_sync */ // atomicAdd(y, 1);\n"
	       "  if (!threadIdx.x) printf(\"__syncthreads __shfl_xor_sync atomicAdd\\n\");\n"
	       "  y[threadIdx.x] = x[threadIdx.x]; }\n" LAUNCH1("k"), CU, 0, 1, 0);
	/* a device helper named like an intrinsic is not one */
	expect("__device__ float my__syncthreads_free(float v) { return v; }\n"
	       "__global__ void k(const float *x, float *y) { y[threadIdx.x] = my__syncthreads_free(x[threadIdx.x]); }\n"
	       LAUNCH1("k"), CU, 0, 1, 0);
}

/* --- CPU backend --- */

#define CPU_ENTRY_HEAD "#include \"kernelbot_abi.h\"\nKB_EXPORT int kb_forward(const DLTensor *in, int ni, DLTensor *out, int no, void *s)\n{\n" \
	"\tconst float *x = (const float *)kb_data(&in[0]);\n\tfloat *y = (float *)kb_data(&out[0]);\n\tint64_t n = kb_numel(&in[0]);\n"

static void test_cpu_levels(void **state)
{
	/* plain loop */
	expect(CPU_ENTRY_HEAD "\tfor (int64_t i = 0; i < n; i++)\n\t\ty[i] = x[i] * 2.0f;\n\treturn 0;\n}\n", CPU, 0, 1, 0);
	why_has("compute 1: one pass");
	/* omp simd */
	expect(CPU_ENTRY_HEAD "#pragma omp simd\n\tfor (int64_t i = 0; i < n; i++)\n\t\ty[i] = x[i] * 2.0f;\n\treturn 0;\n}\n",
	       CPU, 1, 1, 0);
	why_has("memory 1: omp simd");
	/* omp parallel for */
	expect(CPU_ENTRY_HEAD "#pragma omp parallel for schedule(static)\n\tfor (int64_t i = 0; i < n; i++)\n\t\ty[i] = x[i];\n\treturn 0;\n}\n",
	       CPU, 0, 1, 1);
	why_has("parallel 1: omp parallel for");
	/* reduction clause */
	expect(CPU_ENTRY_HEAD "\tdouble s = 0;\n#pragma omp parallel for reduction(+ : s)\n\tfor (int64_t i = 0; i < n; i++)\n\t\ts += x[i];\n"
	       "\ty[0] = (float)s;\n\treturn 0;\n}\n", CPU, 0, 1, 2);
	why_has("parallel 2: omp reduction");
	/* parallel rows with a SIMD reduction inside: hierarchical */
	expect(CPU_ENTRY_HEAD "\tint64_t c = 64, r = n / c;\n"
	       "#pragma omp parallel for\n\tfor (int64_t i = 0; i < r; i++) {\n\t\tfloat s = 0;\n"
	       "#pragma omp simd reduction(+:s)\n\t\tfor (int64_t j = 0; j < c; j++)\n\t\t\ts += x[i * c + j];\n\t\ty[i] = s;\n\t}\n\treturn 0;\n}\n",
	       CPU, 1, 1, 3);
	why_has("omp simd reduction inside a parallel loop");
	/* collapsed parallel loops with a reduction */
	expect(CPU_ENTRY_HEAD "\tdouble t = 0;\n#pragma omp parallel for collapse(2) reduction(+:t)\n"
	       "\tfor (int64_t i = 0; i < n; i++)\n\t\tfor (int64_t j = 0; j < n; j++)\n\t\t\tt += x[i] * x[j];\n\ty[0] = t;\n\treturn 0;\n}\n",
	       CPU, 0, 1, 3);
	/* pragmas in comments and strings do not count */
	expect(CPU_ENTRY_HEAD "\t// #pragma omp parallel for reduction(+:s)\n\t/* #pragma omp simd */\n"
	       "\tconst char *m = \"#pragma omp parallel for\";\n\t(void)m;\n"
	       "\tfor (int64_t i = 0; i < n; i++)\n\t\ty[i] = x[i];\n\treturn 0;\n}\n", CPU, 0, 1, 0);
}

static void test_cpu_memory_compute(void **state)
{
	/* blocked loops */
	static const char blocked[] =
		CPU_ENTRY_HEAD
		"\tconst int64_t BS = 64;\n"
		"\tfor (int64_t i0 = 0; i0 < n; i0 += BS)\n"
		"\t\tfor (int64_t j0 = 0; j0 < n; j0 += BS)\n"
		"\t\t\tfor (int64_t i = i0; i < i0 + BS && i < n; i++)\n"
		"\t\t\t\tfor (int64_t j = j0; j < j0 + BS && j < n; j++)\n"
		"\t\t\t\t\ty[j * n + i] = x[i * n + j];\n"
		"\treturn 0;\n}\n";
	/* AVX2 FMA */
	static const char fma[] =
		"#include <immintrin.h>\n" CPU_ENTRY_HEAD
		"\t__m256 a = _mm256_set1_ps(2.0f), b = _mm256_set1_ps(1.0f);\n"
		"\tfor (int64_t i = 0; i + 8 <= n; i += 8)\n"
		"\t\t_mm256_storeu_ps(y + i, _mm256_fmadd_ps(_mm256_loadu_ps(x + i), a, b));\n"
		"\treturn 0;\n}\n";
	/* register tile of vector accumulators, with prefetch */
	static const char regs[] =
		"#include <immintrin.h>\n" CPU_ENTRY_HEAD
		"\t__m256 acc[4];\n"
		"\tfor (int k = 0; k < 4; k++)\n\t\tacc[k] = _mm256_setzero_ps();\n"
		"\tfor (int64_t i = 0; i + 32 <= n; i += 32) {\n"
		"\t\t__builtin_prefetch(x + i + 256);\n"
		"\t\tfor (int k = 0; k < 4; k++)\n\t\t\tacc[k] = _mm256_add_ps(acc[k], _mm256_loadu_ps(x + i + 8 * k));\n"
		"\t}\n"
		"\t_mm256_storeu_ps(y, _mm256_add_ps(_mm256_add_ps(acc[0], acc[1]), _mm256_add_ps(acc[2], acc[3])));\n"
		"\treturn 0;\n}\n";
	static const char three_pass[] =
		CPU_ENTRY_HEAD
		"\tint64_t cols = kb_dim(&in[0], -1);\n"
		"\tfloat m = -INFINITY, s = 0;\n"
		"\tfor (int64_t c = 0; c < cols; c++) m = x[c] > m ? x[c] : m;\n"
		"\tfor (int64_t c = 0; c < cols; c++) s += expf(x[c] - m);\n"
		"\tfor (int64_t c = 0; c < cols; c++) y[c] = expf(x[c] - m) / s;\n"
		"\treturn 0;\n}\n";
	static const char online_cpu[] =
		CPU_ENTRY_HEAD
		"\tfloat m = -INFINITY, s = 0;\n"
		"\tfor (int64_t c = 0; c < n; c++) {\n"
		"\t\tif (x[c] > m) { s *= std::exp(m - x[c]); m = x[c]; }\n"
		"\t\ts += std::exp(x[c] - m);\n"
		"\t}\n"
		"\tfor (int64_t c = 0; c < n; c++) y[c] = std::exp(x[c] - m) / s;\n"
		"\treturn 0;\n}\n";

	expect(blocked, CPU, 2, 1, 0);
	why_has("blocked loops (i0 += ...)");
	expect(fma, CPU, 1, 3, 0);
	why_has("FMA intrinsics (_mm256_fmadd_ps)");
	why_has("SIMD intrinsics");
	expect(regs, CPU, 3, -1, 0);
	why_has("prefetch");
	expect(three_pass, CPU, 0, 0, 0);
	why_has("two passes over c<cols");
	/* passes over a compile-time bound are tile loops, not passes over the data */
	expect(CPU_ENTRY_HEAD "\t#define TILE 8\n\tfloat acc[TILE];\n\tfor (int t = 0; t < TILE; t++) acc[t] = 0;\n"
	       "\tfor (int64_t i = 0; i < n; i++) acc[i % TILE] += x[i];\n"
	       "\tfor (int t = 0; t < TILE; t++) y[t] = acc[t];\n\treturn 0;\n}\n", CPU, 0, 1, 0);
	expect(online_cpu, CPU, 0, 2, 0);
	why_has("running rescale");
	/* CUDA constructs do not count for the CPU backend, nor OpenMP for CUDA */
	expect(online_cu, CPU, 0, 2, 0);
	expect(CPU_ENTRY_HEAD "#pragma omp parallel for\n\tfor (int64_t i = 0; i < n; i++)\n\t\ty[i] = x[i];\n\treturn 0;\n}\n",
	       CU, 0, 0, 0);
}

/* --- real kernels --- */

static char *slurp(const char *rel)
{
	const char *top = getenv("KB_TOP");
	struct strbuf path = STRBUF_INIT, sb = STRBUF_INIT;

	strbuf_addf(&path, "%s/%s", top ? top : ".", rel);
	if (strbuf_read_file(&sb, path.buf, 0) < 0)
		fail_msg("cannot read %s", path.buf);
	strbuf_release(&path);
	return strbuf_detach(&sb, NULL);
}

static void expect_file(const char *rel, enum kb_backend be, int m, int c, int p)
{
	char *src = slurp(rel);

	score(src, be);
	if (b.memory != m || b.compute != c || b.parallel != p)
		fprintf(stderr, "%s: expected %d%d%d got %d%d%d (%s)\n", rel, m, c, p, b.memory, b.compute,
			b.parallel, b.why);
	assert_int_equal(b.memory, m);
	assert_int_equal(b.compute, c);
	assert_int_equal(b.parallel, p);
	free(src);
}

static void test_real_kernels(void **state)
{
	expect_file("tests/kernels/cuda/ok_linear_gelu.cu", CU, 3, 3, 1);
	why_has("memory 3: register tile acc[][], 2: __shared__ tile xs[][]");
	expect_file("tests/kernels/cuda/ok_softmax.cu", CU, 0, 2, 2);
	why_has("parallel 2: __shfl_xor_sync, 1: __syncthreads");
	expect_file("tests/kernels/cuda/ok_relu.cu", CU, 1, 1, 0);
	expect_file("tests/kernels/cuda/ok_scale_shift.cu", CU, 0, 1, 0);
	expect_file("tests/kernels/cuda/ok_two_outputs.cu", CU, 0, 1, 2);
	expect_file("tests/kernels/cpu/ok_relu.cpp", CPU, 0, 1, 1);
	expect_file("tests/kernels/cpu/ok_softmax.cpp", CPU, 0, 0, 1);
	expect_file("tests/kernels/cpu/ok_linear_gelu.cpp", CPU, 0, 1, 1);
	/* the built-in templates, raw */
	/* rowwise: cross-entropy's last block sums the blocks' partials (an atomic ticket) */
	expect_file("bot/templates/cuda/rowwise.cu.in", CU, 3, 2, 3);
	expect_file("bot/templates/cuda/matmul.cu.in", CU, 0, 3, 0);
	expect_file("bot/templates/cpu/matmul.cpp.in", CPU, 1, 0, 3);
	expect_file("bot/templates/cpu/rowwise.cpp.in", CPU, 1, 2, 1);
	expect_file("bot/templates/cpu/ew.cpp.in", CPU, 1, 1, 1);
}

/*
 * Every kernel and template in the tree scores the same with a comment
 * and a string full of every keyword added, and with its comments
 * removed; why is always filled and short.
 */
static const char keywords[] =
	"__shared__ float t[16][16]; float4 __ldg cp.async memcpy_async ldmatrix wmma::mma_sync mma.sync "
	"__syncthreads(); __shfl_down_sync atomicAdd(p, 1); this_grid s *= expf(m - v); welford "
	"#pragma omp parallel for simd collapse(2) reduction(+:s) _mm256_fmadd_ps __builtin_prefetch "
	"k<<<1, 1>>>(); k2<<<1, 1>>>();";

static void check_dir(const char *rel, enum kb_backend be, int *files)
{
	const char *top = getenv("KB_TOP");
	struct strbuf dir = STRBUF_INIT;
	DIR *d;
	struct dirent *de;

	strbuf_addf(&dir, "%s/%s", top ? top : ".", rel);
	d = opendir(dir.buf);
	assert_non_null(d);
	while ((de = readdir(d))) {
		struct strbuf path = STRBUF_INIT, noisy = STRBUF_INIT;
		char *src, *view;
		struct kb_behavior base, other;
		size_t nl = strlen(de->d_name);

		if (de->d_name[0] == '.' || !(strstr(de->d_name, ".cu") || strstr(de->d_name, ".cpp")) ||
		    (nl > 4 && !strcmp(de->d_name + nl - 4, ".pyc")))
			continue;
		strbuf_addf(&path, "%s/%s", rel, de->d_name);
		src = slurp(path.buf);
		kb_behavior_score(src, be, &base);
		assert_true(base.why[0] != '\0');
		assert_true(strlen(base.why) < sizeof(base.why));
		assert_non_null(strstr(base.why, "memory "));
		assert_non_null(strstr(base.why, "; compute "));
		assert_non_null(strstr(base.why, "; parallel "));

		strbuf_addf(&noisy, "/* %s */\n// %s\nstatic const char *kb_noise = \"%s\";\n%s", keywords, keywords,
			    keywords, src);
		kb_behavior_score(noisy.buf, be, &other);
		if (kb_behavior_cell(&other) != kb_behavior_cell(&base))
			fprintf(stderr, "%s: %s\nvs with noise: %s\n", path.buf, base.why, other.why);
		assert_int_equal(kb_behavior_cell(&other), kb_behavior_cell(&base));

		view = kb_source_view(src, strlen(src), false);
		kb_behavior_score(view, be, &other);
		assert_int_equal(kb_behavior_cell(&other), kb_behavior_cell(&base));
		free(view);
		free(src);
		strbuf_release(&noisy);
		strbuf_release(&path);
		(*files)++;
	}
	closedir(d);
	strbuf_release(&dir);
}

static void test_comments_and_strings_never_count(void **state)
{
	int files = 0;

	check_dir("tests/kernels/cuda", CU, &files);
	check_dir("tests/kernels/cuda/ext", CU, &files);
	check_dir("tests/kernels/cpu", CPU, &files);
	check_dir("bot/templates/cuda", CU, &files);
	check_dir("bot/templates/cpu", CPU, &files);
	assert_true(files > 40);
}

static void test_robust_input(void **state)
{
	static const char *const junk[] = {
		"", "{", "}", "((((", "))))", "]]][[[", "for (", "for (;;", "if (x) else", "__global__",
		"__global__ void", "k<<<", "<<<>>>", "\"unterminated", "'", "R\"x(never closed",
		"/* open comment", "#pragma omp", "#pragma omp parallel for\n", "#define A(x) (x\n",
		"do { } while", "template <int", "asm(", "asm volatile(\"cp.async", "__shared__ float a[",
		"float acc[4][", "x *= expf(", "for (int i = 0; i < n; i += B) for (int j = i; j",
		NULL
	};

	for (const char *const *j = junk; *j; j++) {
		kb_behavior_score(*j, CU, &b);
		assert_true(b.memory >= 0 && b.memory < 4 && b.compute >= 0 && b.compute < 4);
		kb_behavior_score(*j, CPU, &b);
		assert_true(b.parallel >= 0 && b.parallel < 4);
	}
	kb_behavior_score(NULL, CU, &b);
	assert_int_equal(kb_behavior_cell(&b), 0);
}

static void test_cells(void **state)
{
	struct kb_behavior x;

	for (int c = 0; c < KB_BEHAVIOR_CELLS; c++) {
		kb_behavior_from_cell(c, &x);
		assert_true(x.memory >= 0 && x.memory < 4);
		assert_int_equal(kb_behavior_cell(&x), c);
	}
	kb_behavior_from_cell(2 * 16 + 3 * 4 + 1, &x);
	assert_int_equal(x.memory, 2);
	assert_int_equal(x.compute, 3);
	assert_int_equal(x.parallel, 1);
	x.memory = 9;
	x.compute = -2;
	x.parallel = 3;
	assert_int_equal(kb_behavior_cell(&x), 3 * 16 + 0 + 3);
	kb_behavior_from_cell(99, &x);
	assert_int_equal(kb_behavior_cell(&x), 0);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_cuda_naive),
		cmocka_unit_test(test_cuda_memory_vector),
		cmocka_unit_test(test_cuda_memory_shared),
		cmocka_unit_test(test_cuda_memory_async),
		cmocka_unit_test(test_cuda_register_tile_and_tiled),
		cmocka_unit_test(test_cuda_compute_passes),
		cmocka_unit_test(test_cuda_compute_online),
		cmocka_unit_test(test_cuda_compute_tensor_cores),
		cmocka_unit_test(test_cuda_parallel),
		cmocka_unit_test(test_cpu_levels),
		cmocka_unit_test(test_cpu_memory_compute),
		cmocka_unit_test(test_real_kernels),
		cmocka_unit_test(test_comments_and_strings_never_count),
		cmocka_unit_test(test_robust_input),
		cmocka_unit_test(test_cells),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
