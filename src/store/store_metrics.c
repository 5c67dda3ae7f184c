/* resil_store_metrics_add (store.h): the operation store as a metrics
 * source (metrics.h). Here, in libresil-store, so that libresil does not
 * depend on the store's libraries. */
#include <string.h>

#include "resil/metrics.h"
#include "store/store_int.h"

typedef struct store_snap {
  resil_store_stats st;
  int have_pending;
  uint64_t pending;
} store_snap;

static const resil_metric_family store_fams[] = {
    {"resil_store_operations_total", RESIL_METRIC_COUNTER,
     "Operations by result: begin answers (new, replay, in_progress, conflict), terminal states written (committed, failed), effects that failed (effect_failed)."},
    {"resil_store_pending_operations", RESIL_METRIC_GAUGE,
     "Operations PENDING in the database now (all processes)."},
    {"resil_store_recovery_runs_total", RESIL_METRIC_COUNTER, "Recovery runs."},
    {"resil_store_recovered_operations_total", RESIL_METRIC_COUNTER,
     "Operations recovery handled, by result (recovered, failed, damaged)."},
};

static resil_status store_snapshot(const void *obj, void *snap) {
  store_snap *s = snap;
  resil_store *st = (resil_store *)obj;
  resil_status rc = resil_store_get_stats(st, &s->st);
  if (rc != RESIL_OK) return rc;
  s->have_pending = resil_store_count_pending(st, &s->pending) == RESIL_OK;
  return RESIL_OK;
}

static void kind(resil_metrics_emitter *e, const char *label, const char *v, uint64_t n) {
  const char *l[2] = {label, v};
  resil_metrics_sample(e, (double)n, 1, l);
}

static void store_emit(const void *snap, size_t f, resil_metrics_emitter *e) {
  const store_snap *s = snap;
  switch (f) {
  case 0:
    kind(e, "result", "new", s->st.begun_new);
    kind(e, "result", "replay", s->st.begun_replay);
    kind(e, "result", "in_progress", s->st.begun_in_progress);
    kind(e, "result", "conflict", s->st.begun_conflict);
    kind(e, "result", "committed", s->st.committed);
    kind(e, "result", "failed", s->st.failed);
    kind(e, "result", "effect_failed", s->st.effect_failed);
    break;
  case 1:
    if (s->have_pending) resil_metrics_sample(e, (double)s->pending, 0, NULL);
    break;
  case 2: resil_metrics_sample(e, (double)s->st.recovery_runs, 0, NULL); break;
  case 3:
    kind(e, "result", "recovered", s->st.recovered);
    kind(e, "result", "failed", s->st.recovery_failed);
    kind(e, "result", "damaged", s->st.damaged);
    break;
  default: break;
  }
}

static const resil_metrics_source store_src = {
    sizeof(resil_metrics_source), store_fams, sizeof store_fams / sizeof store_fams[0],
    sizeof(store_snap), store_snapshot, store_emit};

resil_status resil_store_metrics_add(resil_metrics *m, const char *name, resil_store *s) {
  if (!m) return RESIL_EMISUSE;
  if (!s) return RESIL_EINVAL;
  return resil_metrics_add_source(m, name ? name : "store", &store_src, s);
}
