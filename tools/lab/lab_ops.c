/* `resil lab --metrics FILE` and `--events FILE` (lab_ops.h). */
#include "lab_ops.h"

#include <ctype.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#ifdef RESIL_HAVE_HTTP
#include "resil/events.h"
#endif

/* One metric family of the merged exposition: its HELP and TYPE lines, and
 * the samples of every capture, in capture order. */
typedef struct fam {
  char *name;
  char *head;
  char *samples;
  size_t len, cap;
} fam;

struct lab_ops {
  char *metrics_path;
  int events_fd;
#ifdef RESIL_HAVE_HTTP
  resil_event_sink *sink;
#endif
  fam *fams;
  size_t nf, capf;
  char tag[48];      /* "p6", "h3_engine" */
  char id[48];       /* "P6", "H3/engine" */
  resil_metrics *cur; /* registered since the last capture */
  char **used;        /* "K:name" of every series name given out */
  size_t nused, capused;
  char names[8][96];  /* client names handed to configs (lab_ops_client_config) */
  int nnames;
};

lab_ops *lab_ops_new(const char *metrics_path, const char *events_path) {
  lab_ops *o = calloc(1, sizeof *o);
  if (!o) return NULL;
  o->events_fd = -1;
  if (metrics_path) {
    o->metrics_path = strdup(metrics_path);
    /* Fail early, before the experiments run, when it cannot be written. */
    FILE *f = o->metrics_path ? fopen(metrics_path, "w") : NULL;
    if (!f) {
      fprintf(stderr, "resil lab: --metrics: cannot write %s: %s\n", metrics_path,
              strerror(errno));
      free(o->metrics_path);
      free(o);
      return NULL;
    }
    fclose(f);
  }
  if (events_path) {
#ifdef RESIL_HAVE_HTTP
    o->events_fd = open(events_path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    resil_event_sink_config sc;
    resil_event_sink_config_init(&sc);
    sc.fd = o->events_fd;
    if (o->events_fd < 0 || resil_event_sink_new(&sc, &o->sink, NULL) != RESIL_OK) {
      fprintf(stderr, "resil lab: --events: cannot write %s: %s\n", events_path,
              strerror(errno));
      if (o->events_fd >= 0) close(o->events_fd);
      free(o->metrics_path);
      free(o);
      return NULL;
    }
#else
    fprintf(stderr, "resil lab: --events: this resil was built without libresil-http\n");
    free(o->metrics_path);
    free(o);
    return NULL;
#endif
  }
  return o;
}

void lab_ops_begin(lab_ops *ops, const char *id) {
  if (!ops) return;
  snprintf(ops->id, sizeof ops->id, "%s", id);
  size_t k = 0;
  for (const char *p = id; *p && k + 1 < sizeof ops->tag; p++)
    ops->tag[k++] = *p == '/' ? '_' : (char)tolower((unsigned char)*p);
  ops->tag[k] = 0;
  ops->nnames = 0;
}

void lab_ops_end(lab_ops *ops, const lab_result *r) {
  if (!ops) return;
  if (ops->cur && resil_metrics_count(ops->cur) > 0)
    fprintf(stderr, "resil lab: %s: %zu instance(s) registered for --metrics and not captured\n",
            ops->tag, resil_metrics_count(ops->cur));
  /* Never rendered: they may be freed already. */
  resil_metrics_free(ops->cur);
  ops->cur = NULL;
#ifdef RESIL_HAVE_HTTP
  if (ops->sink) {
    char details[96];
    snprintf(details, sizeof details, "{\"pass\":%s,\"path\":\"%s\"}",
             r->pass ? "true" : "false", lab_path_name(r->path));
    (void)resil_event_emit(ops->sink, ops->id, "experiment", details);
  }
#else
  (void)r;
#endif
}

/* ---- merging ------------------------------------------------------------- */

static fam *fam_get(lab_ops *o, const char *name, size_t n, int *created) {
  for (size_t i = 0; i < o->nf; i++)
    if (strlen(o->fams[i].name) == n && strncmp(o->fams[i].name, name, n) == 0) {
      *created = 0;
      return &o->fams[i];
    }
  if (o->nf == o->capf) {
    size_t nc = o->capf ? 2 * o->capf : 32;
    fam *nv = realloc(o->fams, nc * sizeof *nv);
    if (!nv) return NULL;
    o->fams = nv;
    o->capf = nc;
  }
  fam *f = &o->fams[o->nf];
  memset(f, 0, sizeof *f);
  f->name = strndup(name, n);
  if (!f->name) return NULL;
  o->nf++;
  *created = 1;
  return f;
}

static void append(char **buf, size_t *len, size_t *cap, const char *p, size_t n) {
  if (*len + n + 1 > *cap) {
    size_t nc = (*len + n + 1) * 2;
    char *nb = realloc(*buf, nc);
    if (!nb) return;
    *buf = nb;
    *cap = nc;
  }
  memcpy(*buf + *len, p, n);
  *len += n;
  (*buf)[*len] = 0;
}

static void head_append(fam *f, const char *p, size_t n) {
  size_t len = f->head ? strlen(f->head) : 0, cap = f->head ? len + 1 : 0;
  append(&f->head, &len, &cap, p, n);
}

static void merge(lab_ops *o, const char *text) {
  fam *cur = NULL;
  int fresh = 0;
  for (const char *p = text; *p;) {
    const char *nl = strchr(p, '\n');
    size_t n = nl ? (size_t)(nl - p) + 1 : strlen(p);
    if (strncmp(p, "# HELP ", 7) == 0 || strncmp(p, "# TYPE ", 7) == 0) {
      const char *name = p + 7;
      size_t k = strcspn(name, " \n");
      /* HELP comes first and says whether the family is new; TYPE follows */
      if (!cur || strlen(cur->name) != k || strncmp(cur->name, name, k) != 0)
        cur = fam_get(o, name, k, &fresh);
      if (cur && fresh) head_append(cur, p, n);
      if (strncmp(p, "# TYPE ", 7) == 0) fresh = 0;
    } else if (cur && n > 1 && p[0] != '#') {
      append(&cur->samples, &cur->len, &cur->cap, p, n);
    }
    p += n;
  }
}

void lab_capture(lab_result *r) {
  lab_ops *o = r ? r->ops : NULL;
  if (!o || !o->cur) return;
  char *text = NULL;
  if (o->metrics_path && resil_metrics_render_alloc(o->cur, &text, NULL) == RESIL_OK) {
    merge(o, text);
    resil_metrics_text_free(o->cur, text);
  }
  resil_metrics_free(o->cur);
  o->cur = NULL;
}

/* ---- registering ----------------------------------------------------------- */

/* "<tag>_<name>", made unique among the names of kind k given out in this
 * run ("_2", "_3", ... appended). NULL when nothing is to be added. */
static resil_metrics *target(lab_result *r, char k, const char *name, char *out, size_t n) {
  lab_ops *o = r ? r->ops : NULL;
  if (!o || !o->metrics_path) return NULL;
  if (!o->cur && resil_metrics_new(NULL, &o->cur) != RESIL_OK) return NULL;
  for (int v = 1; v < 1000; v++) {
    if (v == 1)
      snprintf(out, n, "%s_%s", o->tag, name);
    else
      snprintf(out, n, "%s_%s_%d", o->tag, name, v);
    char key[160];
    snprintf(key, sizeof key, "%c:%s", k, out);
    int seen = 0;
    for (size_t i = 0; i < o->nused && !seen; i++) seen = strcmp(o->used[i], key) == 0;
    if (seen) continue;
    if (o->nused == o->capused) {
      size_t nc = o->capused ? 2 * o->capused : 64;
      char **nv = realloc(o->used, nc * sizeof *nv);
      if (!nv) return NULL;
      o->used = nv;
      o->capused = nc;
    }
    if (!(o->used[o->nused] = strdup(key))) return NULL;
    o->nused++;
    return o->cur;
  }
  return NULL;
}

#define LAB_OPS_ADD(fn, k, type, add)                                          \
  void fn(lab_result *r, const char *name, type obj) {                         \
    char full[128];                                                            \
    resil_metrics *m = obj ? target(r, k, name, full, sizeof full) : NULL;     \
    if (m && add(m, full, obj) != RESIL_OK)                                    \
      fprintf(stderr, "resil lab: --metrics: cannot add %s\n", full);          \
  }

LAB_OPS_ADD(lab_ops_add_breaker, 'b', resil_breaker *, resil_metrics_add_breaker)
LAB_OPS_ADD(lab_ops_add_retry, 'r', const resil_retry *, resil_metrics_add_retry)
LAB_OPS_ADD(lab_ops_add_ratelimiter, 'l', const resil_ratelimiter *, resil_metrics_add_ratelimiter)
LAB_OPS_ADD(lab_ops_add_bulkhead, 'h', const resil_bulkhead *, resil_metrics_add_bulkhead)
LAB_OPS_ADD(lab_ops_add_timelimiter, 't', const resil_timelimiter *, resil_metrics_add_timelimiter)
LAB_OPS_ADD(lab_ops_add_chain, 'c', const resil_chain *, resil_metrics_add_chain)
#ifdef RESIL_HAVE_HTTP
LAB_OPS_ADD(lab_ops_add_client, 'x', const resil_http_client *, resil_http_client_metrics_add)
#endif
#ifdef RESIL_HAVE_STORE
LAB_OPS_ADD(lab_ops_add_store, 's', resil_store *, resil_store_metrics_add)
#endif

const char *lab_ops_name(lab_result *r, const char *name, const char *dflt) {
  lab_ops *o = r ? r->ops : NULL;
  if (!o || o->nnames >= 8) return dflt;
  char *buf = o->names[o->nnames++];
  snprintf(buf, sizeof o->names[0], "%s_%s", o->tag, name);
  return buf;
}

#ifdef RESIL_HAVE_HTTP
void lab_ops_client_config(lab_result *r, resil_http_client_config *cfg, const char *name) {
  lab_ops *o = r ? r->ops : NULL;
  if (!o || !cfg) return;
  if (!cfg->name) cfg->name = lab_ops_name(r, name, NULL);
  if (o->sink && !cfg->on_attempt) {
    cfg->on_attempt = resil_event_attempt_listener;
    cfg->on_attempt_user = o->sink;
  }
  if (o->sink && !cfg->on_instance) {
    cfg->on_instance = resil_event_instance_listener;
    cfg->on_instance_user = o->sink;
  }
}
#endif

void lab_ops_breaker_events(lab_result *r, resil_breaker *br) {
#ifdef RESIL_HAVE_HTTP
  lab_ops *o = r ? r->ops : NULL;
  if (o && o->sink && br)
    (void)resil_breaker_listener_add(br, resil_event_breaker_listener, o->sink);
#else
  (void)r, (void)br;
#endif
}

void lab_ops_hedge_events(lab_result *r, resil_hedge *h) {
#ifdef RESIL_HAVE_HTTP
  lab_ops *o = r ? r->ops : NULL;
  if (o && o->sink && h) (void)resil_hedge_listener_add(h, resil_event_hedge_listener, o->sink);
#else
  (void)r, (void)h;
#endif
}

int lab_ops_finish(lab_ops *o) {
  if (!o) return 0;
  int rc = 0;
  if (o->metrics_path) {
    FILE *f = fopen(o->metrics_path, "w");
    for (size_t i = 0; f && i < o->nf; i++) {
      if (o->fams[i].head) fputs(o->fams[i].head, f);
      if (o->fams[i].samples) fputs(o->fams[i].samples, f);
    }
    if (!f || fclose(f) != 0) {
      fprintf(stderr, "resil lab: --metrics: cannot write %s\n", o->metrics_path);
      rc = -1;
    }
  }
  for (size_t i = 0; i < o->nf; i++) {
    free(o->fams[i].name);
    free(o->fams[i].head);
    free(o->fams[i].samples);
  }
  free(o->fams);
  for (size_t i = 0; i < o->nused; i++) free(o->used[i]);
  free(o->used);
  resil_metrics_free(o->cur);
#ifdef RESIL_HAVE_HTTP
  resil_event_sink_free(o->sink);
#endif
  if (o->events_fd >= 0) close(o->events_fd);
  free(o->metrics_path);
  free(o);
  return rc;
}
