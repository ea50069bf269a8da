/*
 * Settings: every TMX_* variable tmx reads is one entry of one table
 * (config.c) with its type, default, accepted range and help. A context
 * parses the table once, at creation, from its parameters' overrides and
 * the environment, into a config_t; a bad value fails the creation with
 * TMX_ERR_INVALID and a log line naming the setting and what it accepts.
 * The layers below get their part of the result (tl_settings_t) and never
 * read the environment. The launcher's variables (TMX_KVS, TMX_RANK, ...)
 * are a second table, read through config_launcher().
 */
#ifndef TMX_CORE_CONFIG_H
#define TMX_CORE_CONFIG_H

#include <stdint.h>
#include <stdio.h>

#include "proto/proto_table.h"
#include "tl/tl.h"
#include "tmx.h"

typedef struct config {
    int log_level;              /* TMX_LOG_LEVEL: index in error, warn, info, debug */
    char transports[128];       /* TMX_TRANSPORTS */
    int transports_set;         /*   given (not the default): each must open */
    uint64_t unexpected_max;    /* TMX_UNEXPECTED_MAX (0: no bound) */
    int offload;                /* TMX_OFFLOAD: run the engine's thread */
    uint64_t offload_poll_us;   /* TMX_OFFLOAD_POLL_US */
    uint64_t offload_tags;      /* TMX_OFFLOAD_TAGS: max_num_tags */
    uint64_t offload_ops;       /* TMX_OFFLOAD_OPS: max_ops */
    uint64_t offload_min;       /* TMX_OFFLOAD_MIN */
    int offload_offer;          /* TMX_OFFLOAD_OFFER: receives offered to their senders */
    uint64_t reg_cache;         /* TMX_REG_CACHE: entries of the registration cache (0: off) */
    proto_spec_t proto;         /* TMX_PROTO */
    tl_settings_t tl;           /* the transports' settings */
} config_t;

/* Fills c from the table: for each setting the last "NAME=VALUE" of
 * overrides (a NULL-terminated array; NULL for none), else the
 * environment, else the default. TMX_ERR_INVALID, logged, for a value out
 * of its range or an override naming no setting; c is then undefined. */
tmx_status_t config_load(config_t *c, const char *const *overrides);

/* The default of every setting (what config_load gives with an empty
 * environment). */
void config_defaults(config_t *c);

/* The value of one of the launcher's variables (TMX_KVS, TMX_RANK,
 * TMX_SIZE, TMX_JOBID), or NULL when it is not set. Any other name is a
 * programming error: logged, NULL. */
const char *config_launcher(const char *name);

/* The tables, as tmx-info prints them: name, type and range, value,
 * default, help; then the launcher's variables. */
void config_print(FILE *f);

#endif
