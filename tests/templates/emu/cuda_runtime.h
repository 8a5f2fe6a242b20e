/*
 * A tiny CUDA emulator for tests on machines without a GPU: generated
 * CUDA kernels compile with g++ against this header (g++ -x c++
 * -I tests/templates/emu) and run on the CPU, one std::thread per CUDA
 * thread, blocks one after another. __syncthreads and warp shuffles are
 * real barriers, so indexing, bounds, reductions and barrier placement are
 * exercised; memory is host memory ("device" pointers are plain pointers).
 * A barrier that waits more than 20 s aborts: a thread skipped a
 * __syncthreads or a shuffle its warp made.
 *
 * Not for speed, not for timing, not a model of the memory system.
 */
#ifndef KB_EMU_CUDA_RUNTIME_H
#define KB_EMU_CUDA_RUNTIME_H

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <math.h>
#include <stdint.h>
#include <tuple>
#include <ucontext.h>
#include <vector>

#define KB_EMU 1
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __restrict__ __restrict
#define __constant__

struct dim3 {
	unsigned int x, y, z;
	dim3(unsigned int a = 1, unsigned int b = 1, unsigned int c = 1) : x(a), y(b), z(c) {}
};

struct float2 { float x, y; };
struct float4 { float x, y, z, w; };
struct alignas(8) uint2 { unsigned int x, y; };
struct alignas(16) uint4 { unsigned int x, y, z, w; };
struct int2 { int x, y; };
static inline float4 make_float4(float a, float b, float c, float d) { return float4{ a, b, c, d }; }
static inline float2 make_float2(float a, float b) { return float2{ a, b }; }

inline dim3 threadIdx(0, 0, 0), blockIdx(0, 0, 0), blockDim(1, 1, 1), gridDim(1, 1, 1);

typedef int cudaError_t;
typedef void *cudaStream_t;
#define cudaSuccess 0
#define cudaErrorInvalidValue 1
enum cudaDeviceAttr { cudaDevAttrMultiProcessorCount = 16, cudaDevAttrMaxSharedMemoryPerBlockOptin = 97 };
enum cudaMemcpyKind { cudaMemcpyHostToDevice, cudaMemcpyDeviceToHost, cudaMemcpyDeviceToDevice, cudaMemcpyDefault };

namespace kb_emu {

/*
 * One block at a time; its threads are user-level contexts run round-robin
 * by a scheduler. A thread runs until it waits: at __syncthreads (released
 * when every live thread of the block waits there) or in a warp shuffle
 * (released when every live lane of its warp waits there). Nothing can be
 * released while threads wait: a thread skipped a barrier its block or
 * warp made; abort with a message.
 */
enum wait_kind { RUNNABLE, AT_BLOCK, AT_WARP, DONE };

/*
 * Switching contexts: on x86-64 a few instructions (callee-saved registers
 * and the stack pointer); glibc's swapcontext elsewhere, which also saves
 * the signal mask with a system call per switch.
 */
#if defined(__x86_64__)
#define KB_EMU_FAST 1
extern "C" void kb_emu_swap(void **save_sp, void *load_sp);
asm(".text\n"
    ".p2align 4\n"
    "kb_emu_swap:\n"
    "\tpushq %rbp\n\tpushq %rbx\n\tpushq %r12\n\tpushq %r13\n\tpushq %r14\n\tpushq %r15\n"
    "\tmovq %rsp, (%rdi)\n"
    "\tmovq %rsi, %rsp\n"
    "\tpopq %r15\n\tpopq %r14\n\tpopq %r13\n\tpopq %r12\n\tpopq %rbx\n\tpopq %rbp\n"
    "\tret\n");
#else
#define KB_EMU_FAST 0
#endif

struct thread_state {
	ucontext_t ctx;
	void *sp;
	wait_kind wait;
	char *stack;
};

struct block_state {
	ucontext_t sched;
	void *sched_sp;
	std::vector<thread_state> th;
	unsigned int nt;
	std::vector<unsigned char> slots; /* 32 lanes x 16 bytes per warp */
	unsigned int cur;
};

inline block_state *blk = nullptr;
inline int sm_count = 2;

static inline unsigned int linear_tid()
{
	return threadIdx.x + threadIdx.y * blockDim.x + threadIdx.z * blockDim.x * blockDim.y;
}

/* threadIdx for the running context: set by the scheduler before each switch */
static inline void set_thread(unsigned int t)
{
	const dim3 &b = blockDim;

	threadIdx = dim3(t % b.x, (t / b.x) % b.y, t / (b.x * b.y));
}

static inline void wait_at(wait_kind k)
{
	thread_state &me = blk->th[blk->cur];

	me.wait = k;
#if KB_EMU_FAST
	kb_emu_swap(&me.sp, blk->sched_sp);
#else
	swapcontext(&me.ctx, &blk->sched);
#endif
}

template <typename T>
static inline T shfl(T v, int kind, int arg)
{
	unsigned int tid = linear_tid(), warp = tid / 32, lane = tid % 32;
	unsigned char *slots = &blk->slots[(size_t)warp * 32 * 16];
	unsigned int src;
	T r;

	static_assert(sizeof(T) <= 16, "shuffle of more than 16 bytes");
	memcpy(slots + lane * 16, &v, sizeof(T));
	wait_at(AT_WARP);
	switch (kind) {
	case 0: src = lane ^ (unsigned int)arg; break;
	case 1: src = lane + (unsigned int)arg; break;
	case 2: src = lane >= (unsigned int)arg ? lane - (unsigned int)arg : lane; break;
	default: src = (unsigned int)arg; break;
	}
	if (src >= 32 || warp * 32 + src >= blk->nt)
		src = lane;
	memcpy(&r, slots + src * 16, sizeof(T));
	wait_at(AT_WARP);
	return r;
}

struct start_arg {
	void (*run)(void *, unsigned int);
	void *self;
	unsigned int t;
};

inline start_arg *starting = nullptr; /* the threads' start arguments, indexed by thread */

static inline void trampoline(unsigned int lo, unsigned int hi)
{
	start_arg *a = (start_arg *)(((uintptr_t)hi << 32) | (uintptr_t)lo);

	a->run(a->self, a->t);
	blk->th[a->t].wait = DONE;
	/* uc_link returns to the scheduler */
}

#if KB_EMU_FAST
/* a fresh thread's first instructions: run, then back to the scheduler for good */
static inline void entry(void)
{
	const unsigned int t = blk->cur;

	starting[t].run(starting[t].self, t);
	blk->th[t].wait = DONE;
	kb_emu_swap(&blk->th[t].sp, blk->sched_sp);
	abort(); /* never resumed */
}

/* a stack whose first switch "returns" into entry with the ABI's alignment */
static inline void *fresh_stack(char *stack, size_t size)
{
	uintptr_t top = ((uintptr_t)stack + size) & ~(uintptr_t)15;
	void **p = (void **)(top - 16);

	p[0] = (void *)entry;   /* popped by ret: entry starts with rsp % 16 == 8 */
	p[1] = nullptr;
	for (int k = 1; k <= 6; k++)
		p[-k] = nullptr;     /* rbp, rbx, r12..r15 */
	return (void *)(p - 6);
}
#endif

/* run every thread of the current block to completion */
static inline void schedule(void)
{
	const unsigned int nt = blk->nt, nw = (nt + 31) / 32;

	for (;;) {
		bool ran = false, live = false;

		for (unsigned int t = 0; t < nt; t++) {
			if (blk->th[t].wait != RUNNABLE)
				continue;
			blk->cur = t;
			set_thread(t);
#if KB_EMU_FAST
			kb_emu_swap(&blk->sched_sp, blk->th[t].sp);
#else
			swapcontext(&blk->sched, &blk->th[t].ctx);
#endif
			ran = true;
		}
		if (ran)
			continue;
		/* everyone waits or is done: release a barrier */
		bool all_block = true, released = false;

		for (unsigned int t = 0; t < nt; t++) {
			live |= blk->th[t].wait != DONE;
			if (blk->th[t].wait != DONE && blk->th[t].wait != AT_BLOCK)
				all_block = false;
		}
		if (!live)
			return;
		for (unsigned int w = 0; w < nw; w++) {
			bool all = true, any = false;

			for (unsigned int t = w * 32; t < nt && t < w * 32 + 32; t++) {
				any |= blk->th[t].wait == AT_WARP;
				if (blk->th[t].wait != DONE && blk->th[t].wait != AT_WARP)
					all = false;
			}
			if (any && all) {
				for (unsigned int t = w * 32; t < nt && t < w * 32 + 32; t++)
					if (blk->th[t].wait == AT_WARP)
						blk->th[t].wait = RUNNABLE;
				released = true;
			}
		}
		if (!released && all_block) {
			for (unsigned int t = 0; t < nt; t++)
				if (blk->th[t].wait == AT_BLOCK)
					blk->th[t].wait = RUNNABLE;
			released = true;
		}
		if (!released) {
			fprintf(stderr, "kb_emu: deadlock: threads wait at barriers their block or warp never reaches\n");
			abort();
		}
	}
}

template <typename F>
struct launcher {
	F f;
	dim3 g, b;

	template <typename... A>
	void operator()(A... args)
	{
		const unsigned int nt = b.x * b.y * b.z;
		const size_t stack = 128 * 1024;
		ucontext_t proto;
		block_state st;
		std::vector<start_arg> sa(nt);
		struct closure {
			F f;
			std::tuple<A...> args;
		} cl{ f, std::tuple<A...>(args...) };
		auto run = [](void *self, unsigned int t) {
			closure *c = (closure *)self;

			(void)t;
			std::apply(c->f, c->args);
		};

		if (nt == 0 || nt > 1024 || g.x == 0 || g.y == 0 || g.z == 0 || g.y > 65535 || g.z > 65535) {
			fprintf(stderr, "kb_emu: bad launch grid (%u,%u,%u) block (%u,%u,%u)\n", g.x, g.y, g.z,
				b.x, b.y, b.z);
			abort();
		}
		st.nt = nt;
		st.th.resize(nt);
		st.slots.assign((size_t)(nt + 31) / 32 * 32 * 16, 0);
		for (unsigned int t = 0; t < nt; t++)
			st.th[t].stack = (char *)malloc(stack);
		blk = &st;
		starting = sa.data();
		blockDim = b;
		gridDim = g;
		getcontext(&proto);
		for (unsigned int bz = 0; bz < g.z; bz++)
			for (unsigned int by = 0; by < g.y; by++)
				for (unsigned int bx = 0; bx < g.x; bx++) {
					blockIdx = dim3(bx, by, bz);
					for (unsigned int t = 0; t < nt; t++) {
						thread_state &ts = st.th[t];
						uintptr_t p = (uintptr_t)&sa[t];

						sa[t] = start_arg{ run, &cl, t };
#if KB_EMU_FAST
						(void)p;
						ts.sp = fresh_stack(ts.stack, stack);
#else
						ts.ctx = proto;
						ts.ctx.uc_stack.ss_sp = ts.stack;
						ts.ctx.uc_stack.ss_size = stack;
						ts.ctx.uc_link = &st.sched;
						makecontext(&ts.ctx, (void (*)(void))trampoline, 2,
							    (unsigned int)(p & 0xffffffffu), (unsigned int)(p >> 32));
#endif
						ts.wait = RUNNABLE;
					}
					schedule();
				}
		for (unsigned int t = 0; t < nt; t++)
			free(st.th[t].stack);
		blk = nullptr;
	}
};

template <typename F>
launcher<F> launch(F f, dim3 g, dim3 b)
{
	return launcher<F>{ f, g, b };
}

} /* namespace kb_emu */

#define KB_LAUNCH(kernel, grid, block, stream) kb_emu::launch(kernel, dim3(grid), dim3(block))

static inline void __syncthreads(void) { kb_emu::wait_at(kb_emu::AT_BLOCK); }
static inline void __syncwarp(unsigned int mask = 0xffffffffu) { (void)mask; kb_emu::wait_at(kb_emu::AT_WARP); }
template <typename T> static inline T __shfl_xor_sync(unsigned int m, T v, int o, int w = 32) { (void)m; (void)w; return kb_emu::shfl(v, 0, o); }
template <typename T> static inline T __shfl_down_sync(unsigned int m, T v, int o, int w = 32) { (void)m; (void)w; return kb_emu::shfl(v, 1, o); }
template <typename T> static inline T __shfl_up_sync(unsigned int m, T v, int o, int w = 32) { (void)m; (void)w; return kb_emu::shfl(v, 2, o); }
template <typename T> static inline T __shfl_sync(unsigned int m, T v, int l, int w = 32) { (void)m; (void)w; return kb_emu::shfl(v, 3, l); }
template <typename T> static inline T __ldg(const T *p) { return *p; }
template <typename T> static inline T __ldcg(const T *p) { return *p; }
/* blocks run one after another: a fence has nothing to order, an atomic
 * nothing to race with */
static inline void __threadfence(void) { }
static inline unsigned int atomicAdd(unsigned int *p, unsigned int v) { unsigned int o = *p; *p = o + v; return o; }

static inline float rsqrtf(float x) { return 1.0f / sqrtf(x); }
/* the fast intrinsics as the exact functions: glibc declares __expf and
 * __logf but exports neither, so they are macros here */
#define __expf(x) expf(x)
#define __logf(x) logf(x)
static inline float __fdividef(float a, float b) { return a / b; }
static inline float __frcp_rn(float x) { return 1.0f / x; }

static inline cudaError_t cudaGetLastError(void) { return cudaSuccess; }
static inline cudaError_t cudaPeekAtLastError(void) { return cudaSuccess; }
static inline const char *cudaGetErrorString(cudaError_t e) { (void)e; return "emu"; }
static inline cudaError_t cudaGetDevice(int *d) { *d = 0; return cudaSuccess; }
static inline cudaError_t cudaDeviceGetAttribute(int *v, cudaDeviceAttr a, int d)
{
	(void)d;
	*v = a == cudaDevAttrMultiProcessorCount ? kb_emu::sm_count : 232448;
	return cudaSuccess;
}
static inline cudaError_t cudaMalloc(void **p, size_t n)
{
	*p = aligned_alloc(256, (n + 255) / 256 * 256);
	return *p ? cudaSuccess : 2;
}
static inline cudaError_t cudaFree(void *p) { free(p); return cudaSuccess; }
static inline cudaError_t cudaMemsetAsync(void *p, int v, size_t n, cudaStream_t s) { (void)s; memset(p, v, n); return cudaSuccess; }
static inline cudaError_t cudaMemcpyAsync(void *d, const void *s, size_t n, cudaMemcpyKind k, cudaStream_t st)
{
	(void)k; (void)st;
	memmove(d, s, n);
	return cudaSuccess;
}

/* --- half and bfloat16 (bit-exact conversions, as the CUDA intrinsics) --- */

struct __half { uint16_t x; };
struct __nv_bfloat16 { uint16_t x; };

static inline float kb_emu_bits_f(uint32_t w) { float f; memcpy(&f, &w, 4); return f; }
static inline uint32_t kb_emu_f_bits(float f) { uint32_t w; memcpy(&w, &f, 4); return w; }
static inline float __half2float(__half h)
{
	const uint32_t w = (uint32_t)h.x << 16, sign = w & 0x80000000u, two_w = w + w;
	const float norm = kb_emu_bits_f((two_w >> 4) + (0xE0u << 23)) * 0x1.0p-112f;
	const float denorm = kb_emu_bits_f((two_w >> 17) | (126u << 23)) - 0.5f;
	return kb_emu_bits_f(sign | (two_w < (1u << 27) ? kb_emu_f_bits(denorm) : kb_emu_f_bits(norm)));
}
static inline __half __float2half_rn(float f)
{
	float base = (fabsf(f) * 0x1.0p+112f) * 0x1.0p-110f;
	const uint32_t w = kb_emu_f_bits(f), shl1_w = w + w, sign = w & 0x80000000u;
	uint32_t bias = shl1_w & 0xFF000000u;

	if (bias < 0x71000000u)
		bias = 0x71000000u;
	base = kb_emu_bits_f((bias >> 1) + 0x07800000u) + base;
	const uint32_t bits = kb_emu_f_bits(base);
	__half h;
	h.x = (uint16_t)((sign >> 16) | (shl1_w > 0xFF000000u ? 0x7E00u : ((bits >> 13) & 0x7C00u) + (bits & 0xFFFu)));
	return h;
}
static inline float __bfloat162float(__nv_bfloat16 h) { return kb_emu_bits_f((uint32_t)h.x << 16); }
static inline __nv_bfloat16 __float2bfloat16_rn(float f)
{
	__nv_bfloat16 h;
	const uint32_t u = kb_emu_f_bits(f);

	h.x = f != f ? 0x7FC0 : (uint16_t)((u + (((u >> 16) & 1u) + 0x7FFFu)) >> 16);
	return h;
}

#endif
