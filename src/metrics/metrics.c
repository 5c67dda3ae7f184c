/* resil_metrics (metrics.h): the collector and the text format writer. The
 * library's own kinds are sources like any other (src/metrics/sources.c),
 * so there is one rendering path. */
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "core/internal.h"
#include "resil/metrics.h"

typedef struct entry {
  const resil_metrics_source *src;
  const void *obj;
  char *name;
  void *snap;
  int ok; /* snapshot succeeded in the current render */
} entry;

struct resil_metrics {
  const resil_allocator *alloc;
  pthread_mutex_t mu;
  entry *v;
  size_t n, cap;
};

/* ---- the writer: a caller's buffer (counting past its end) or chunks
 * flushed to a sink ------------------------------------------------------ */

typedef struct writer {
  char *buf;
  size_t cap; /* usable bytes of buf, the NUL excluded */
  size_t len; /* bytes the text needs so far */
  int (*flush)(void *user, const char *p, size_t n); /* chunk mode */
  void *user;
  int failed;
  char chunk[4096];
  size_t clen;
} writer;

static void w_put(writer *w, const char *p, size_t n) {
  if (w->flush) {
    w->len += n;
    while (n > 0 && !w->failed) {
      size_t k = sizeof w->chunk - w->clen;
      if (k > n) k = n;
      memcpy(w->chunk + w->clen, p, k);
      w->clen += k;
      p += k;
      n -= k;
      if (w->clen == sizeof w->chunk) {
        if (w->flush(w->user, w->chunk, w->clen)) w->failed = 1;
        w->clen = 0;
      }
    }
    return;
  }
  if (w->len < w->cap) {
    size_t k = w->cap - w->len;
    memcpy(w->buf + w->len, p, k < n ? k : n);
  }
  w->len += n;
}

static void w_str(writer *w, const char *s) { w_put(w, s, strlen(s)); }

/* Escapes for a label value (quote too) or a HELP text. */
static void w_escaped(writer *w, const char *s, int quote) {
  const char *run = s;
  for (; *s; s++) {
    const char *rep = NULL;
    if (*s == '\\')
      rep = "\\\\";
    else if (*s == '\n')
      rep = "\\n";
    else if (quote && *s == '"')
      rep = "\\\"";
    if (rep) {
      w_put(w, run, (size_t)(s - run));
      w_str(w, rep);
      run = s + 1;
    }
  }
  w_put(w, run, (size_t)(s - run));
}

static void format_value(char *out, size_t n, double v) {
  if (isnan(v))
    snprintf(out, n, "NaN");
  else if (isinf(v))
    snprintf(out, n, v > 0 ? "+Inf" : "-Inf");
  else if (v == 0)
    snprintf(out, n, "0");
  else if (fabs(v) <= 9007199254740992.0 && v == floor(v))
    snprintf(out, n, "%.0f", v);
  else {
    /* The shortest of 15 and 17 digits that reads back as v. */
    snprintf(out, n, "%.15g", v);
    if (strtod(out, NULL) != v) snprintf(out, n, "%.17g", v);
  }
}

static int name_char(char c, int first, int colon) {
  if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_') return 1;
  if (colon && c == ':') return 1;
  return !first && c >= '0' && c <= '9';
}

static int valid_name(const char *s, int colon) {
  if (!s || !*s) return 0;
  for (size_t i = 0; s[i]; i++)
    if (!name_char(s[i], i == 0, colon)) return 0;
  return 1;
}

/* ---- emitter ------------------------------------------------------------ */

struct resil_metrics_emitter {
  writer *w;
  const resil_metric_family *fam;
  const char *inst;
};

void resil_metrics_sample(resil_metrics_emitter *e, double value,
                          size_t nlabels, const char *const *labels) {
  if (!e || nlabels > RESIL_METRICS_MAX_LABELS || (nlabels && !labels)) return;
  for (size_t i = 0; i < nlabels; i++) {
    const char *ln = labels[2 * i], *lv = labels[2 * i + 1];
    if (!valid_name(ln, 0) || strcmp(ln, "name") == 0 || !lv ||
        !resil__utf8_valid(lv, strlen(lv)))
      return;
  }
  writer *w = e->w;
  w_str(w, e->fam->name);
  w_str(w, "{name=\"");
  w_escaped(w, e->inst, 1);
  w_put(w, "\"", 1);
  for (size_t i = 0; i < nlabels; i++) {
    w_put(w, ",", 1);
    w_str(w, labels[2 * i]);
    w_put(w, "=\"", 2);
    w_escaped(w, labels[2 * i + 1], 1);
    w_put(w, "\"", 1);
  }
  char num[40];
  format_value(num, sizeof num, value);
  w_put(w, "} ", 2);
  w_str(w, num);
  w_put(w, "\n", 1);
}

/* ---- collector ---------------------------------------------------------- */

resil_status resil_metrics_new(const resil_allocator *alloc, resil_metrics **out) {
  if (!out) return RESIL_EINVAL;
  resil_metrics *m = resil__calloc(alloc, sizeof *m);
  if (!m) return RESIL_ENOMEM;
  m->alloc = alloc;
  if (pthread_mutex_init(&m->mu, NULL) != 0) {
    resil__free(alloc, m);
    return RESIL_ESYS;
  }
  *out = m;
  return RESIL_OK;
}

static void entry_free(resil_metrics *m, entry *e) {
  resil__free(m->alloc, e->name);
  resil__free(m->alloc, e->snap);
}

void resil_metrics_free(resil_metrics *m) {
  if (!m) return;
  for (size_t i = 0; i < m->n; i++) entry_free(m, &m->v[i]);
  resil__free(m->alloc, m->v);
  pthread_mutex_destroy(&m->mu);
  resil__free(m->alloc, m);
}

size_t resil_metrics_count(const resil_metrics *m) {
  if (!m) return 0;
  resil_metrics *mm = (resil_metrics *)m; /* the mutex needs non-const */
  pthread_mutex_lock(&mm->mu);
  size_t n = mm->n;
  pthread_mutex_unlock(&mm->mu);
  return n;
}

static int valid_source(const resil_metrics_source *src) {
  if (!src || src->struct_size < sizeof *src || !src->families ||
      src->n_families == 0 || !src->snapshot || !src->emit ||
      src->snapshot_size > 65536)
    return 0;
  for (size_t i = 0; i < src->n_families; i++) {
    const resil_metric_family *f = &src->families[i];
    if (!valid_name(f->name, 1) || !f->help) return 0;
    size_t n = strlen(f->name);
    if (f->type == RESIL_METRIC_COUNTER && (n < 6 || strcmp(f->name + n - 6, "_total")))
      return 0;
    if (f->type != RESIL_METRIC_COUNTER && f->type != RESIL_METRIC_GAUGE) return 0;
  }
  return 1;
}

resil_status resil_metrics_add_source(resil_metrics *m, const char *name,
                                      const resil_metrics_source *src,
                                      const void *obj) {
  if (!m) return RESIL_EMISUSE;
  if (!obj || !name || !*name || !resil__utf8_valid(name, strlen(name)) ||
      !valid_source(src))
    return RESIL_EINVAL;
  int ok;
  char *copy = resil__strdup(m->alloc, name, &ok);
  void *snap = resil__calloc(m->alloc, src->snapshot_size);
  if (!ok || !snap) {
    resil__free(m->alloc, copy);
    resil__free(m->alloc, snap);
    return RESIL_ENOMEM;
  }
  resil_status st = RESIL_OK;
  pthread_mutex_lock(&m->mu);
  for (size_t i = 0; i < m->n; i++)
    if (m->v[i].src == src && strcmp(m->v[i].name, name) == 0) st = RESIL_EINVAL;
  if (st == RESIL_OK && m->n == m->cap) {
    size_t nc = m->cap ? 2 * m->cap : 8;
    entry *nv = resil__alloc(m->alloc, nc * sizeof *nv);
    if (!nv) {
      st = RESIL_ENOMEM;
    } else {
      if (m->n) memcpy(nv, m->v, m->n * sizeof *nv);
      resil__free(m->alloc, m->v);
      m->v = nv;
      m->cap = nc;
    }
  }
  if (st == RESIL_OK)
    m->v[m->n++] = (entry){.src = src, .obj = obj, .name = copy, .snap = snap};
  pthread_mutex_unlock(&m->mu);
  if (st != RESIL_OK) {
    resil__free(m->alloc, copy);
    resil__free(m->alloc, snap);
  }
  return st;
}

resil_status resil_metrics_remove(resil_metrics *m, const void *obj) {
  if (!m) return RESIL_EMISUSE;
  size_t removed = 0;
  pthread_mutex_lock(&m->mu);
  size_t j = 0;
  for (size_t i = 0; i < m->n; i++) {
    if (m->v[i].obj == obj) {
      entry_free(m, &m->v[i]);
      removed++;
    } else {
      m->v[j++] = m->v[i];
    }
  }
  m->n = j;
  pthread_mutex_unlock(&m->mu);
  return removed ? RESIL_OK : RESIL_EINVAL;
}

/* ---- rendering ---------------------------------------------------------- */

static void render(resil_metrics *m, writer *w) {
  pthread_mutex_lock(&m->mu);
  for (size_t i = 0; i < m->n; i++)
    m->v[i].ok = m->v[i].src->snapshot(m->v[i].obj, m->v[i].snap) == RESIL_OK;
  for (size_t i = 0; i < m->n; i++) {
    const resil_metrics_source *src = m->v[i].src;
    int seen = 0;
    for (size_t k = 0; k < i && !seen; k++) seen = m->v[k].src == src;
    if (seen) continue;
    for (size_t f = 0; f < src->n_families; f++) {
      const resil_metric_family *fam = &src->families[f];
      w_str(w, "# HELP ");
      w_str(w, fam->name);
      w_put(w, " ", 1);
      w_escaped(w, fam->help, 0);
      w_str(w, "\n# TYPE ");
      w_str(w, fam->name);
      w_str(w, fam->type == RESIL_METRIC_COUNTER ? " counter\n" : " gauge\n");
      for (size_t k = i; k < m->n; k++) {
        if (m->v[k].src != src || !m->v[k].ok) continue;
        resil_metrics_emitter e = {.w = w, .fam = fam, .inst = m->v[k].name};
        src->emit(m->v[k].snap, f, &e);
      }
    }
  }
  pthread_mutex_unlock(&m->mu);
}

resil_status resil_metrics_render(resil_metrics *m, char *buf, size_t cap,
                                  size_t *len) {
  if (!m) return RESIL_EMISUSE;
  if (!buf && cap > 0) return RESIL_EINVAL;
  writer w;
  memset(&w, 0, offsetof(writer, chunk));
  w.buf = buf;
  w.cap = cap ? cap - 1 : 0;
  render(m, &w);
  if (len) *len = w.len;
  if (!buf) return RESIL_OK;
  if (w.len + 1 > cap) {
    buf[0] = '\0';
    return RESIL_ENOMEM;
  }
  buf[w.len] = '\0';
  return RESIL_OK;
}

resil_status resil_metrics_render_alloc(resil_metrics *m, char **out, size_t *len) {
  if (!m) return RESIL_EMISUSE;
  if (!out) return RESIL_EINVAL;
  size_t need = 0;
  resil_status st = resil_metrics_render(m, NULL, 0, &need);
  /* Numbers may grow between the two renders: retry with more room. */
  for (int tries = 0; st == RESIL_OK && tries < 8; tries++) {
    size_t cap = need + need / 8 + 256;
    char *buf = resil__alloc(m->alloc, cap);
    if (!buf) return RESIL_ENOMEM;
    st = resil_metrics_render(m, buf, cap, &need);
    if (st == RESIL_OK) {
      *out = buf;
      if (len) *len = need;
      return RESIL_OK;
    }
    resil__free(m->alloc, buf);
    st = RESIL_OK;
  }
  return RESIL_ENOMEM;
}

void resil_metrics_text_free(resil_metrics *m, char *text) {
  if (m) resil__free(m->alloc, text);
}

static int flush_fd(void *user, const char *p, size_t n) {
  int fd = *(int *)user;
  while (n > 0) {
    ssize_t k = write(fd, p, n);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) return -1;
    p += k;
    n -= (size_t)k;
  }
  return 0;
}

static int flush_file(void *user, const char *p, size_t n) {
  return fwrite(p, 1, n, (FILE *)user) == n ? 0 : -1;
}

static resil_status write_chunked(resil_metrics *m,
                                  int (*flush)(void *, const char *, size_t),
                                  void *user) {
  writer *w = resil__alloc(m->alloc, sizeof *w);
  if (!w) return RESIL_ENOMEM;
  memset(w, 0, sizeof *w);
  w->flush = flush;
  w->user = user;
  render(m, w);
  if (!w->failed && w->clen && flush(user, w->chunk, w->clen)) w->failed = 1;
  resil_status st = w->failed ? RESIL_EIO : RESIL_OK;
  resil__free(m->alloc, w);
  return st;
}

resil_status resil_metrics_write_fd(resil_metrics *m, int fd) {
  if (!m) return RESIL_EMISUSE;
  if (fd < 0) return RESIL_EINVAL;
  return write_chunked(m, flush_fd, &fd);
}

resil_status resil_metrics_write_file(resil_metrics *m, FILE *f) {
  if (!m) return RESIL_EMISUSE;
  if (!f) return RESIL_EINVAL;
  return write_chunked(m, flush_file, f);
}
