/* Settings: every TMX_* environment variable is one entry of one table,
 * with its default and a line of help; tmx-info prints the table. */
#ifndef TMX_CORE_CONFIG_H
#define TMX_CORE_CONFIG_H

/* The value of a setting: the environment's, else the default. */
const char *config_get(const char *name);

/* The built-in default of a setting. */
const char *config_default(const char *name);

/* A numeric setting in [lo, hi]; anything else is logged and the default
 * used. */
unsigned long long config_u64(const char *name, unsigned long long lo, unsigned long long hi);

#endif
