/* Replays a fuzz target's corpus as a regression test: every file in the
 * directories given on the command line is passed once to the target's
 * LLVMFuzzerTestOneInput (the sanitizer builds check each run). Prints
 * "N passed, 0 failed" for the files replayed; a target that crashes or
 * aborts fails the test. */
#define _DEFAULT_SOURCE
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static int replay_file(const char *path) {
  FILE *f = fopen(path, "rb");
  if (!f) return -1;
  uint8_t *buf = NULL;
  size_t len = 0, cap = 0;
  for (;;) {
    if (len == cap) {
      cap = cap ? cap * 2 : 4096;
      uint8_t *nb = realloc(buf, cap);
      if (!nb) {
        free(buf);
        fclose(f);
        return -1;
      }
      buf = nb;
    }
    size_t n = fread(buf + len, 1, cap - len, f);
    if (n == 0) break;
    len += n;
  }
  fclose(f);
  LLVMFuzzerTestOneInput(buf, len);
  free(buf);
  return 0;
}

int main(int argc, char **argv) {
  long files = 0;
  for (int i = 1; i < argc; i++) {
    DIR *d = opendir(argv[i]);
    if (!d) {
      fprintf(stderr, "replay: cannot open %s\n", argv[i]);
      return 1;
    }
    struct dirent *e;
    while ((e = readdir(d))) {
      if (e->d_name[0] == '.') continue;
      char path[4096];
      snprintf(path, sizeof path, "%s/%s", argv[i], e->d_name);
      if (replay_file(path) != 0) {
        fprintf(stderr, "replay: cannot read %s\n", path);
        closedir(d);
        return 1;
      }
      files++;
    }
    closedir(d);
  }
  if (files == 0) {
    fprintf(stderr, "replay: empty corpus\n");
    return 1;
  }
  printf("%ld passed, 0 failed\n", files);
  return 0;
}
