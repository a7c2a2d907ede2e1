/* Runs the MLP of examples/mlp.hlo, compiled ahead of time by `tessera compile`, from plain C:
 * no Tessera, LLVM or Cranelift at run time. `make` builds and runs it (see the Makefile). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"

/* A buffer of `bytes` aligned as the module requires (aligned_alloc wants a multiple). */
static void* buffer(uint64_t bytes) {
  uint64_t n = (bytes + mlp_ALIGNMENT - 1) / mlp_ALIGNMENT * mlp_ALIGNMENT;
  void* p = aligned_alloc(mlp_ALIGNMENT, n ? n : mlp_ALIGNMENT);
  if (!p) {
    perror("aligned_alloc");
    exit(1);
  }
  return p;
}

int main(void) {
  /* The runtime library's GEMM may use both cores (the default is the calling thread only). */
  if (tessera_rt_set_threads(2) != 0) fprintf(stderr, "mlp: running single-threaded\n");
  /* Arguments 0..4 are x f32[32,64], w1 f32[64,128], b1 f32[128], w2 f32[128,10], b2 f32[10],
   * all row-major (the header documents each layout). */
  float* x = buffer(mlp_ARG_BYTES[0]);
  float* w1 = buffer(mlp_ARG_BYTES[1]);
  float* b1 = buffer(mlp_ARG_BYTES[2]);
  float* w2 = buffer(mlp_ARG_BYTES[3]);
  float* b2 = buffer(mlp_ARG_BYTES[4]);
  float* out = buffer(mlp_RESULT_BYTES[0]);
  void* temp = mlp_TEMP_BYTES ? buffer(mlp_TEMP_BYTES) : NULL;
  for (int i = 0; i < mlp_ARG0_DIM0 * mlp_ARG0_DIM1; i++) x[i] = (float)(i % 7) * 0.1f;
  for (int i = 0; i < mlp_ARG1_DIM0 * mlp_ARG1_DIM1; i++) w1[i] = (float)(i % 5 - 2) * 0.01f;
  for (int i = 0; i < mlp_ARG2_DIM0; i++) b1[i] = 0.1f;
  for (int i = 0; i < mlp_ARG3_DIM0 * mlp_ARG3_DIM1; i++) w2[i] = (float)(i % 3 - 1) * 0.02f;
  for (int i = 0; i < mlp_ARG4_DIM0; i++) b2[i] = (float)i;

  int32_t rc = mlp_run(x, w1, b1, w2, b2, out, temp);
  if (rc != 0) {
    fprintf(stderr, "mlp: %s\n", mlp_error_string(rc));
    return 1;
  }
  printf("mlp: %d x %d logits, rows 0 and %d:\n", mlp_RESULT0_DIM0, mlp_RESULT0_DIM1, mlp_RESULT0_DIM0 - 1);
  for (int r = 0; r < mlp_RESULT0_DIM0; r += mlp_RESULT0_DIM0 - 1) {
    for (int c = 0; c < mlp_RESULT0_DIM1; c++) printf(" %8.4f", out[r * mlp_RESULT0_DIM1 + c]);
    printf("\n");
  }
  /* A misaligned argument is refused with a code, not undefined behaviour. */
  rc = mlp_run(x + 1, w1, b1, w2, b2, out, temp);
  printf("misaligned x: code %d (%s)\n", rc, mlp_error_string(rc));
  free(x), free(w1), free(b1), free(w2), free(b2), free(out), free(temp);
  return 0;
}
