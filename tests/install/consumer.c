/* A C program built against an installed h3rt (find_package): one forward of a checkpoint. */
#include <h3rt/h3rt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int main(int argc, char** argv) {
  h3rt_model* m = NULL;
  h3rt_config c;
  if (argc != 2 || h3rt_model_create(argv[1], NULL, &m) != H3RT_OK || h3rt_model_config(m, &c))
    return fprintf(stderr, "consumer: %s\n", h3rt_last_error()), 1;
  enum { L = 3, N = 2, T = 1, H = 2, W = 4, NV = T * (H / 2) * (W / 2) };
  float *text = calloc(L * c.text_dim, 4), *v = calloc(NV * 96, 4), *a = calloc(2 * N * 32, 4);
  float *vv = calloc(NV * 96, 4), *av = calloc(2 * N * 32, 4);
  for (int i = 0; i < NV * 96; ++i) v[i] = (float)(i % 7) * 0.25f - 0.75f;
  for (int i = 0; i < L * c.text_dim; ++i) text[i] = (float)(i % 5) * 0.5f - 1.0f;
  if (h3rt_forward_t2va(m, L, N, T, H, W, 0.7f, v, a, text, vv, av) != H3RT_OK)
    return fprintf(stderr, "consumer: %s\n", h3rt_last_error()), 1;
  if (!isfinite(vv[0]) || vv[0] == 0.0f || !isfinite(av[0])) return 1;
  printf("h3rt %s (api %d): hidden %lld, v[0] %.6f\n", h3rt_version(), h3rt_api_version(),
         (long long)c.hidden, vv[0]);
  h3rt_model_free(m);
  return 0;
}
