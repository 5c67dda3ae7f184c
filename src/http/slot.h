/* libresil-http internal, layer 3 (see src/http/README.md): what slot.c
 * offers: a pool slot's libcurl handles. Uses transfer.h. Not installed. */
#ifndef RESIL_HTTP_SLOT_H
#define RESIL_HTTP_SLOT_H

#include "transfer.h"

/* Creates the slot's libcurl handles (the easy handle through
 * resil__http_easy_setup, and the slot's own multi). Returns 0 or -1. */
int resil__http_slot_setup(resil_http_client *c, http_slot *s);
void resil__http_slot_cleanup(const resil_http_client *c, http_slot *s);

#endif
