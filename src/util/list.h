/* Intrusive circular doubly-linked lists: O(1) insert and unlink, no
 * allocation. A list head is a node linked to itself when empty. */
#ifndef TMX_UTIL_LIST_H
#define TMX_UTIL_LIST_H

#include <stddef.h>

typedef struct util_dlist {
    struct util_dlist *next;
    struct util_dlist *prev;
} util_dlist_t;

#define util_container_of(ptr, type, member) ((type *)((char *)(ptr)-offsetof(type, member)))

static inline void util_dlist_init(util_dlist_t *head)
{
    head->next = head;
    head->prev = head;
}

static inline int util_dlist_empty(const util_dlist_t *head)
{
    return head->next == head;
}

static inline void util_dlist_push_tail(util_dlist_t *head, util_dlist_t *node)
{
    node->prev = head->prev;
    node->next = head;
    head->prev->next = node;
    head->prev = node;
}

static inline void util_dlist_push_head(util_dlist_t *head, util_dlist_t *node)
{
    node->next = head->next;
    node->prev = head;
    head->next->prev = node;
    head->next = node;
}

static inline void util_dlist_unlink(util_dlist_t *node)
{
    node->prev->next = node->next;
    node->next->prev = node->prev;
    node->next = node;
    node->prev = node;
}

/* Moves every node of from, in order, to the tail of head; from is left
 * empty. O(1). */
static inline void util_dlist_splice_tail(util_dlist_t *head, util_dlist_t *from)
{
    util_dlist_t *first = from->next, *last = from->prev;

    if (first == from)
        return;
    first->prev = head->prev;
    head->prev->next = first;
    last->next = head;
    head->prev = last;
    util_dlist_init(from);
}

/* First node, or NULL when empty. */
static inline util_dlist_t *util_dlist_first(const util_dlist_t *head)
{
    return head->next == head ? NULL : head->next;
}

#define util_dlist_foreach(pos, head) for ((pos) = (head)->next; (pos) != (head); (pos) = (pos)->next)

#define util_dlist_foreach_safe(pos, tmp, head) \
    for ((pos) = (head)->next, (tmp) = (pos)->next; (pos) != (head); (pos) = (tmp), (tmp) = (pos)->next)

#endif
