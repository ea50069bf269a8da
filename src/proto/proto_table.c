/* The protocol table (proto_table.h): TMX_PROTO's syntax, the defaults,
 * and each open transport's compiled table. */
#include "proto/proto_table.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "util/log.h"

static const struct {
    const char *name;
    unsigned kind;
    const char *what;
} kinds[] = {
    {"eager", PROTO_EAGER, "eager: the payload in the packet"},
    {"get", PROTO_GET, "rendezvous, the receiver copies from the sender's buffer"},
    {"coop", PROTO_COOP, "rendezvous, sender and receiver each copy a part"},
    {"copy", PROTO_COPY, "rendezvous, the sender's side sends the bytes as packets"},
    {"write", PROTO_WRITE, "rendezvous by write, the sender writes into the receiver's buffer"},
};

#define N_KINDS (sizeof(kinds) / sizeof(kinds[0]))

const char *proto_kind_name(unsigned kind)
{
    for (size_t i = 0; i < N_KINDS; i++) {
        if (kinds[i].kind == kind)
            return kinds[i].name;
    }
    return "?";
}

static const char *kind_what(unsigned kind)
{
    for (size_t i = 0; i < N_KINDS; i++) {
        if (kinds[i].kind == kind)
            return kinds[i].what;
    }
    return "?";
}

/* ------------------------------------------------------------- parsing */

static int parse_size(const char *s, uint64_t *out)
{
    char *end;
    uint64_t v, mul = 1;

    if (*s < '0' || *s > '9')
        return 0;
    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno != 0)
        return 0;
    if (*end == 'k' || *end == 'K')
        mul = 1ull << 10, end++;
    else if (*end == 'm' || *end == 'M')
        mul = 1ull << 20, end++;
    else if (*end == 'g' || *end == 'G')
        mul = 1ull << 30, end++;
    if (*end != '\0' || v > UINT64_MAX / mul)
        return 0;
    *out = v * mul;
    return 1;
}

static int parse_rule(char *r, proto_rule_t *out, const char **why)
{
    char *at = strchr(r, '@');
    size_t i;

    if (at == NULL) {
        *why = "a rule is PROTOCOL@SIZE";
        return 0;
    }
    *at = '\0';
    for (i = 0; i < N_KINDS && strcmp(r, kinds[i].name) != 0; i++)
        ;
    if (i == N_KINDS) {
        *why = "protocols are eager, get, coop, copy and write";
        return 0;
    }
    out->kind = kinds[i].kind;
    if (!parse_size(at + 1, &out->from)) {
        *why = "a size is a number of bytes, with k, m or g";
        return 0;
    }
    return 1;
}

/* TRANSPORT:RULE[,RULE...] */
static int parse_entry(char *e, proto_spec_t *spec, const char **why)
{
    char *colon = strchr(e, ':'), *save = NULL;
    int n = 0;

    if (colon == NULL || colon == e || (size_t)(colon - e) >= sizeof(spec->t[0].tl)) {
        *why = "an entry is TRANSPORT:RULE[,RULE...]";
        return 0;
    }
    *colon = '\0';
    for (int i = 0; i < spec->n; i++) {
        if (strcmp(spec->t[i].tl, e) == 0) {
            *why = "a transport is named twice";
            return 0;
        }
    }
    if (spec->n == PROTO_MAX_TLS) {
        *why = "too many transports";
        return 0;
    }
    strcpy(spec->t[spec->n].tl, e);
    for (char *r = strtok_r(colon + 1, ",", &save); r != NULL; r = strtok_r(NULL, ",", &save)) {
        proto_rule_t *rule = &spec->t[spec->n].rules[n];
        if (n == PROTO_MAX_RULES) {
            *why = "too many rules for one transport";
            return 0;
        }
        if (!parse_rule(r, rule, why))
            return 0;
        if (n > 0 && rule->from <= rule[-1].from) {
            *why = "rules must ascend by size";
            return 0;
        }
        if (rule->kind == PROTO_EAGER && (n > 0 || rule->from != 0)) {
            *why = "eager may only be the first rule, from 0";
            return 0;
        }
        n++;
    }
    if (n == 0) {
        *why = "a transport without rules";
        return 0;
    }
    spec->t[spec->n++].n_rules = n;
    return 1;
}

int proto_spec_parse(const char *v, proto_spec_t *spec, const char **why)
{
    char buf[256], *save = NULL;

    memset(spec, 0, sizeof(*spec));
    if (strlen(v) >= sizeof(buf)) {
        *why = "too long";
        return 0;
    }
    strcpy(buf, v);
    for (char *e = strtok_r(buf, ";", &save); e != NULL; e = strtok_r(NULL, ";", &save)) {
        if (!parse_entry(e, spec, why))
            return 0;
    }
    for (int i = 0; i < spec->n; i++) {
        int known = 0;
        for (int k = 0; tl_names[k] != NULL; k++)
            known |= strcmp(tl_names[k], spec->t[i].tl) == 0;
        if (!known) {
            *why = "names a transport that does not exist";
            return 0;
        }
    }
    return 1;
}

/* ----------------------------------------------------------- compiling */

static void defaults(proto_tl_t *t, const tl_iface_t *iface, int offload)
{
    t->n_rules = 0;
    if (iface->get_kinds & PROTO_GET)
        t->rules[t->n_rules++] = (proto_rule_t){0, PROTO_GET};
    else
        t->rules[t->n_rules++] = (proto_rule_t){0, PROTO_COPY};
    if ((iface->get_kinds & PROTO_COOP) && PROTO_COOP_MIN > t->eager_end && !offload)
        t->rules[t->n_rules++] = (proto_rule_t){PROTO_COOP_MIN, PROTO_COOP};
}

tmx_status_t proto_tl_compile(proto_tl_t *t, const proto_spec_t *spec, const tl_iface_t *iface)
{
    const char *name = iface->ops->name;
    int s = 0;

    memset(t, 0, sizeof(*t));
    t->iface = iface;
    t->eager_end = iface->eager_limit + 1;
    while (s < spec->n && strcmp(spec->t[s].tl, name) != 0)
        s++;
    if (s == spec->n) {
        defaults(t, iface, spec->offload);
        return TMX_OK;
    }
    t->set = 1;
    for (int i = 0; i < spec->t[s].n_rules; i++) {
        proto_rule_t r = spec->t[s].rules[i];
        if (r.kind == PROTO_EAGER) {
            if (r.from != 0) {
                util_error("TMX_PROTO: %s: eager must start at 0", name);
                return TMX_ERR_INVALID;
            }
            continue;
        }
        if (r.kind == PROTO_WRITE ? iface->put_kinds == 0 : !(iface->get_kinds & r.kind)) {
            util_error("TMX_PROTO: %s does not offer %s here (offers:%s%s%s%s)", name,
                       proto_kind_name(r.kind), iface->get_kinds & PROTO_GET ? " get" : "",
                       iface->get_kinds & PROTO_COOP ? " coop" : "",
                       iface->get_kinds & PROTO_COPY ? " copy" : "",
                       iface->put_kinds != 0 ? " write" : "");
            return TMX_ERR_INVALID;
        }
        if (t->n_rules == 0 && r.from < t->eager_end)
            t->eager_end = r.from; /* eager stops where the first rendezvous rule starts */
        t->rules[t->n_rules++] = r;
    }
    if (t->n_rules == 0) /* eager alone: above its limit, the transport's first read */
        t->rules[t->n_rules++] = (proto_rule_t){0, iface->get_kinds & PROTO_GET ? PROTO_GET : PROTO_COPY};
    t->rules[0].from = 0; /* also what synchronous sends below eager_end use */
    return TMX_OK;
}

/* ------------------------------------------------------------ printing */

static void range(FILE *f, uint64_t from, uint64_t to_excl, const char *what)
{
    if (to_excl == UINT64_MAX)
        fprintf(f, "      from %llu B: %s\n", (unsigned long long)from, what);
    else
        fprintf(f, "      %llu B .. %llu B: %s\n", (unsigned long long)from,
                (unsigned long long)to_excl - 1, what);
}

void proto_tl_print(FILE *f, const proto_tl_t *t)
{
    uint64_t pos = 0;

    if (t->eager_end > 0) {
        range(f, 0, t->eager_end, "eager (synchronous sends: the next protocol)");
        pos = t->eager_end;
    }
    for (int i = 0; i < t->n_rules; i++) {
        uint64_t end = i + 1 < t->n_rules ? t->rules[i + 1].from : UINT64_MAX;
        char what[128];
        if (end <= pos)
            continue;
        snprintf(what, sizeof(what), "%s (%s)", kind_what(t->rules[i].kind),
                 proto_kind_name(t->rules[i].kind));
        range(f, pos, end, what);
        pos = end;
    }
    if (t->set)
        fprintf(f, "      (set by TMX_PROTO)\n");
}
