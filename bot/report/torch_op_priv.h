#ifndef KB_REPORT_TORCH_OP_PRIV_H
#define KB_REPORT_TORCH_OP_PRIV_H
/* ops.py's fixed text (torch_op_py.c), filled by kb_torch_op_render (torch_op.c). */
extern const char kb_torch_op_py[];

#endif
