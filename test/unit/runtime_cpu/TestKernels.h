// C kernels for engine tests, compiled at test time into the kernel library
// of a hand-built artifact. Each checks the descriptors and scalars it gets
// (abort() on a violation, so a broken ABI fails the test loudly) and
// computes something simple that a test can recompute (symbols kiln_*):
//   embed_f32     x[t] = bf16 embed row of ids[t]            (parallel rows)
//   kv_append     K/V[(past + t) % slots] = x[t][0:w], x[t][w:2w]
//   attend        out[t] = sum over visible positions j of K[j] + V[j] / 2
//   expert_matvec mv[t][n] = x[t][0:K] . W[n] with W the second matrix of a
//                 VNNI-blocked expert stack
//   stamp_parts   stamp[p] = 1 for each part p, 0 beyond
//   logits        logits[v] = (g + s/2) . lm_head[v][0:w] + mv[v % N] / 100
//                 + c for the last token (or for every token, if the output
//                 has T rows), and logits[V-1] = sum(stamp)
//   kv_append_batch, attend_batch: the same for a batched call, where token t
//                 continues conversation t at positions[t] and the caches
//                 hold n conversations one after another
#pragma once

namespace kiln::runtime_test {

constexpr const char *kTestKernelsSource = R"c(
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct { void *allocated, *aligned; int64_t offset, sizes[1], strides[1]; } D1;
typedef struct { void *allocated, *aligned; int64_t offset, sizes[2], strides[2]; } D2;
typedef struct { void *allocated, *aligned; int64_t offset, sizes[3], strides[3]; } D3;

static void check(int ok, const char *kernel, const char *what) {
  if (!ok) {
    fprintf(stderr, "test kernel %s: check failed: %s\n", kernel, what);
    abort();
  }
}
static float bf16(uint16_t bits) {
  uint32_t word = (uint32_t)bits << 16;
  float value;
  memcpy(&value, &word, 4);
  return value;
}
static int64_t scalar(void **args, int i) { return *(int64_t *)args[i]; }
static int64_t round16(int64_t t) { return (t + 15) / 16 * 16; }
static void check2(const D2 *d, const char *kernel) {
  check(d->allocated == d->aligned && d->offset == 0, kernel, "base");
  check(d->strides[1] == 1 && d->strides[0] == d->sizes[1], kernel, "strides");
  check(((uintptr_t)d->aligned & 3) == 0, kernel, "alignment");
}
static void check3(const D3 *d, const char *kernel) {
  check(d->allocated == d->aligned && d->offset == 0, kernel, "base");
  check(d->strides[2] == 1 && d->strides[1] == d->sizes[2] &&
        d->strides[0] == d->sizes[1] * d->sizes[2], kernel, "strides");
}

/* [ids i32[T], embed bf16[V, H], x f32[T16, H]]; Tokens, Part, Parts */
void kiln_embed_f32(void **args) {
  const D1 *ids = args[0]; const D2 *w = args[1]; const D2 *x = args[2];
  int64_t T = scalar(args, 3), part = scalar(args, 4), parts = scalar(args, 5);
  check(ids->sizes[0] == T && ids->strides[0] == 1, "embed_f32", "ids shape");
  check2(w, "embed_f32");
  check2(x, "embed_f32");
  check(x->sizes[0] == round16(T) && x->sizes[1] == w->sizes[1], "embed_f32", "x shape");
  check(parts >= 1 && part >= 0 && part < parts, "embed_f32", "part");
  const int32_t *tok = ids->aligned; const uint16_t *W = w->aligned; float *X = x->aligned;
  int64_t H = w->sizes[1];
  for (int64_t t = part; t < T; t += parts) {
    check(tok[t] >= 0 && tok[t] < w->sizes[0], "embed_f32", "token id");
    for (int64_t h = 0; h < H; ++h)
      X[t * H + h] = bf16(W[tok[t] * H + h]);
  }
}

/* [x f32[T16, H], positions i32[T], K f32[slots, heads, dim], V]; Tokens, PastTokens */
void kiln_kv_append(void **args) {
  const D2 *x = args[0]; const D1 *pos = args[1]; const D3 *k = args[2]; const D3 *v = args[3];
  int64_t T = scalar(args, 4), past = scalar(args, 5);
  check2(x, "kv_append");
  check3(k, "kv_append");
  check3(v, "kv_append");
  check(pos->sizes[0] == T, "kv_append", "positions shape");
  check(k->sizes[0] == v->sizes[0] && k->sizes[1] == v->sizes[1], "kv_append", "k/v shape");
  int64_t slots = k->sizes[0], width = k->sizes[1] * k->sizes[2], H = x->sizes[1];
  const int32_t *p = pos->aligned; const float *X = x->aligned;
  float *K = k->aligned, *V = v->aligned;
  for (int64_t t = 0; t < T; ++t) {
    check(p[t] == past + t, "kv_append", "position");
    int64_t slot = (past + t) % slots;
    for (int64_t i = 0; i < width; ++i) {
      K[slot * width + i] = X[t * H + i];
      V[slot * width + i] = X[t * H + width + i];
    }
  }
}

/* [K, V, out f32[T, w]]; Tokens, PastTokens, Constant window (0: global) */
void kiln_attend(void **args) {
  const D3 *k = args[0]; const D3 *v = args[1]; const D2 *out = args[2];
  int64_t T = scalar(args, 3), past = scalar(args, 4), window = scalar(args, 5);
  int64_t slots = k->sizes[0], width = k->sizes[1] * k->sizes[2];
  check(out->sizes[0] == T && out->sizes[1] == width, "attend", "out shape");
  check(window == 0 ? slots >= past + T : slots == window, "attend", "slots");
  const float *K = k->aligned, *V = v->aligned;
  float *O = out->aligned;
  for (int64_t t = 0; t < T; ++t) {
    int64_t p = past + t, first = window == 0 || p < window ? 0 : p - window + 1;
    for (int64_t i = 0; i < width; ++i) {
      float sum = 0;
      for (int64_t j = first; j <= p; ++j)
        sum += K[(j % slots) * width + i] + 0.5f * V[(j % slots) * width + i];
      O[t * width + i] = sum;
    }
  }
}

/* [x f32[T16, H], W bf16[stack, N * K] (VNNI blocks), mv f32[T16, N]]; Tokens, Constant K */
void kiln_expert_matvec(void **args) {
  const D2 *x = args[0]; const D2 *w = args[1]; const D2 *mv = args[2];
  int64_t T = scalar(args, 3), K = scalar(args, 4), N = mv->sizes[1];
  check(w->sizes[0] == 2 && w->sizes[1] == N * K, "expert_matvec", "w shape");
  const float *X = x->aligned; const uint16_t *W = (const uint16_t *)w->aligned + N * K;
  float *M = mv->aligned;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t n = 0; n < N; ++n) {
      float sum = 0;
      for (int64_t kk = 0; kk < K; ++kk) {
        int64_t block = (n / 16) * (K / 32) + kk / 32;
        int64_t r = (kk % 32) / 2, c = n % 16, p = kk % 2;
        sum += X[t * x->sizes[1] + kk] * bf16(W[block * 512 + r * 32 + 2 * c + p]);
      }
      M[t * N + n] = sum;
    }
}

/* [stamp f32[8]]; Part, Parts */
void kiln_stamp_parts(void **args) {
  const D1 *stamp = args[0];
  int64_t part = scalar(args, 1), parts = scalar(args, 2);
  check(part >= 0 && part < parts && parts <= stamp->sizes[0], "stamp_parts", "part");
  float *S = stamp->aligned;
  S[part] = 1.0f;
  if (part == 0)
    for (int64_t i = parts; i < stamp->sizes[0]; ++i)
      S[i] = 0.0f;
}

/* [g f32[T, w], s f32[T, w], mv f32[T16, N], lm bf16[V, H], stamp f32[8],
    logits f32[1 or T, V]]; Tokens, Part, Parts, Constant c */
void kiln_logits(void **args) {
  const D2 *g = args[0]; const D2 *s = args[1]; const D2 *mv = args[2];
  const D2 *lm = args[3]; const D1 *stamp = args[4]; const D2 *out = args[5];
  int64_t T = scalar(args, 6), part = scalar(args, 7), parts = scalar(args, 8);
  float c = (float)scalar(args, 9);
  int64_t V = lm->sizes[0], H = lm->sizes[1], width = g->sizes[1], N = mv->sizes[1];
  int64_t rows = out->sizes[0];
  check((rows == 1 || rows == T) && out->sizes[1] == V, "logits", "out shape");
  check2(out, "logits");
  for (int64_t row = 0; row < rows; ++row) {
    int64_t t = rows == 1 ? T - 1 : row;
    const float *G = (const float *)g->aligned + t * width;
    const float *S = (const float *)s->aligned + t * width;
    const float *M = (const float *)mv->aligned + t * N;
    const uint16_t *L = lm->aligned;
    float *O = (float *)out->aligned + row * V;
    int64_t begin = V * part / parts, end = V * (part + 1) / parts;
    for (int64_t v = begin; v < end; ++v) {
      float sum = 0;
      for (int64_t i = 0; i < width; ++i)
        sum += (G[i] + 0.5f * S[i]) * bf16(L[v * H + i]);
      O[v] = sum + M[v % N] / 100.0f + c;
    }
    if (end == V) {
      float stamps = 0;
      for (int64_t i = 0; i < stamp->sizes[0]; ++i)
        stamps += ((const float *)stamp->aligned)[i];
      O[V - 1] = stamps;
    }
  }
}

/* [x f32[T16, H], positions i32[T], K f32[n * slots, heads, dim], V]; Tokens, Constant n */
void kiln_kv_append_batch(void **args) {
  const D2 *x = args[0]; const D1 *pos = args[1]; const D3 *k = args[2]; const D3 *v = args[3];
  int64_t T = scalar(args, 4), n = scalar(args, 5);
  check3(k, "kv_append_batch");
  check(T <= n && k->sizes[0] % n == 0 && v->sizes[0] == k->sizes[0], "kv_append_batch",
        "conversations");
  int64_t slots = k->sizes[0] / n, width = k->sizes[1] * k->sizes[2], H = x->sizes[1];
  const int32_t *p = pos->aligned; const float *X = x->aligned;
  float *K = k->aligned, *V = v->aligned;
  for (int64_t t = 0; t < T; ++t) {
    int64_t slot = t * slots + p[t] % slots;
    for (int64_t i = 0; i < width; ++i) {
      K[slot * width + i] = X[t * H + i];
      V[slot * width + i] = X[t * H + width + i];
    }
  }
}

/* [K, V, positions i32[T], out f32[T, w]]; Tokens, Constant window (0: global), Constant n */
void kiln_attend_batch(void **args) {
  const D3 *k = args[0]; const D3 *v = args[1]; const D1 *pos = args[2]; const D2 *out = args[3];
  int64_t T = scalar(args, 4), window = scalar(args, 5), n = scalar(args, 6);
  check(k->sizes[0] % n == 0, "attend_batch", "conversations");
  int64_t slots = k->sizes[0] / n, width = k->sizes[1] * k->sizes[2];
  check(out->sizes[0] == T && out->sizes[1] == width, "attend_batch", "out shape");
  check(window == 0 || slots == window, "attend_batch", "slots");
  const int32_t *P = pos->aligned; const float *K = k->aligned, *V = v->aligned;
  float *O = out->aligned;
  for (int64_t t = 0; t < T; ++t) {
    int64_t p = P[t], first = window == 0 || p < window ? 0 : p - window + 1;
    check(window != 0 || p < slots, "attend_batch", "position");
    for (int64_t i = 0; i < width; ++i) {
      float sum = 0;
      for (int64_t j = first; j <= p; ++j) {
        int64_t slot = t * slots + j % slots;
        sum += K[slot * width + i] + 0.5f * V[slot * width + i];
      }
      O[t * width + i] = sum;
    }
  }
}
)c";

} // namespace kiln::runtime_test
