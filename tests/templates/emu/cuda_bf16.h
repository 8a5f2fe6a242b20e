/* kb_emu: __nv_bfloat16 lives in cuda_runtime.h */
#include "cuda_runtime.h"
