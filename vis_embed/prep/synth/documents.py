"""Synthetic document pages (``vis-embed synth --modalities image,document``).

Pages of rendered words -- a title and a few paragraphs of made-up words, drawn with the font
Pillow ships (``ImageFont.load_default``) -- and text queries that retrieve them, written
BEIR-style like the visual-document sets of MMEB-V2: ``eval/docs_queries.jsonl``
(``{"id", "text"}``), ``eval/docs_corpus.jsonl`` (``{"id", "image"}``) and graded
``eval/docs_qrels.jsonl`` (``{"query_id", "corpus_id", "score"}``), one ``qrels`` manifest
entry (``SynthDocRet``, meta-task ``VR``).

Words come from a pseudo-word vocabulary drawn per seed.  Pages are grouped in *topics*:
every page of a topic carries the topic's words (two of them in its title), and each page
has three *keywords* that appear on no other page.  A query is written from one page: one
of its title's topic words and two of its keywords.  Grades: 2 for that page, 1 for the other pages
of its topic (they share the topic words, not the keywords), others omitted (0).

Text is wrapped when planning (with the same fonts), so a page's metadata row holds exactly
the lines drawn on it.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from vis_embed.prep.synth.planner_api import SynthPlanner, add_eval_entry, schedule
from vis_embed.prep.synth.render import png_bytes
from vis_embed.prep.synth.sampling import Params, stream_rng

PAGE_SET = "docs"
INSTRUCTIONS = ("Find a document page that matches the given query.",
                "Understand the content of the provided document page.")
TOPIC_WORDS = 3     # per topic
TITLE_TOPIC_WORDS = 2  # of them in every title of the topic (and in its queries)
KEYWORDS = 3        # per page, unique to it; the first ends the title
_CONSONANTS = "bdfgklmnprstvz"
_VOWELS = "aeiou"


@dataclass(frozen=True)
class DocumentSize:
    topics: int
    pages_per_topic: int
    width: int
    height: int
    body_px: int        # font sizes (FreeType Pillow builds; the bitmap fallback has one size)
    title_px: int
    paragraphs: int


DOCUMENT_SIZES: dict[str, DocumentSize] = {
    "tiny": DocumentSize(topics=3, pages_per_topic=4, width=192, height=256, body_px=9, title_px=14, paragraphs=2),
    "small": DocumentSize(topics=6, pages_per_topic=6, width=320, height=416, body_px=12, title_px=20,
                          paragraphs=3),
    "full": DocumentSize(topics=20, pages_per_topic=10, width=640, height=832, body_px=20, title_px=32,
                         paragraphs=4),
}


@functools.lru_cache(maxsize=16)
def _font(size: int) -> ImageFont.FreeTypeFont | ImageFont.ImageFont:
    return ImageFont.load_default(size=size)


def _line_height(size: int) -> int:
    return round(size * 1.35)


def _margin(width: int) -> int:
    return round(width * 0.07)


def pseudo_words(rng: np.random.Generator, count: int) -> list[str]:
    """``count`` distinct made-up words of 2-3 consonant-vowel syllables (e.g. ``talomi``)."""
    words: list[str] = []
    seen: set[str] = set()
    while len(words) < count:
        syllables = int(rng.integers(2, 4))
        word = "".join(_CONSONANTS[int(rng.integers(len(_CONSONANTS)))] + _VOWELS[int(rng.integers(len(_VOWELS)))]
                       for _ in range(syllables))
        if word not in seen:
            seen.add(word)
            words.append(word)
    return words


def wrap(words: list[str], size: int, width: float) -> list[str]:
    """Greedy word wrap of ``words`` into lines no wider than ``width`` pixels."""
    font, lines, line = _font(size), [], ""
    for word in words:
        candidate = f"{line} {word}" if line else word
        if line and font.getlength(candidate) > width:
            lines.append(line)
            candidate = word
        line = candidate
    return [*lines, line] if line else lines


def _paragraph(rng: np.random.Generator, filler: list[str], topic: list[str], keywords: list[str],
               sentences: int, lead: list[str]) -> list[str]:
    """Sentences of 6-11 words: mostly filler, some topic words and keywords; ``lead`` opens it."""
    words: list[str] = []
    for number in range(sentences):
        sentence = list(lead) if number == 0 else []
        while len(sentence) < int(rng.integers(6, 12)):
            draw = rng.random()
            pool = topic if draw < 0.15 else keywords if draw < 0.22 else filler
            sentence.append(pool[int(rng.integers(len(pool)))])
        sentence[0] = sentence[0].capitalize()
        sentence[-1] += "."
        words.extend(sentence)
    return words


def plan_page(rng: np.random.Generator, size: DocumentSize, filler: list[str], topic: list[str],
              keywords: list[str]) -> Params:
    """A page's render spec: title lines and body lines (wrapped), paper and ink colours.
    The keywords are in the title and the first sentence, so they are always on the page."""
    text_width = size.width - 2 * _margin(size.width)
    title = wrap([w.capitalize() for w in (*topic[:TITLE_TOPIC_WORDS], keywords[0])], size.title_px, text_width)
    body: list[list[str]] = []
    for number in range(size.paragraphs):
        lead = keywords[1:] if number == 0 else []
        body.append(wrap(_paragraph(rng, filler, topic, keywords, 4, lead), size.body_px, text_width))
    # Keep whole lines that fit; the first paragraph (with the keywords) always fits the presets.
    room = (size.height - 2 * _margin(size.width) - len(title) * _line_height(size.title_px)) \
        // _line_height(size.body_px)
    paragraphs: list[list[str]] = []
    for lines in body:
        if room <= 1:
            break
        paragraphs.append(lines[: room - 1])
        room -= len(paragraphs[-1]) + 1  # a blank line between paragraphs
    paper, ink = int(rng.integers(236, 256)), int(rng.integers(15, 60))
    return {"width": size.width, "height": size.height, "title_px": size.title_px, "body_px": size.body_px,
            "title": title, "paragraphs": paragraphs, "paper": [paper, paper, int(paper * 0.97)],
            "ink": [ink, ink, ink]}


def page_png(page: Params) -> bytes:
    """Render a page spec of :func:`plan_page` (a pure function of it) to PNG bytes."""
    image = Image.new("RGB", (page["width"], page["height"]), tuple(page["paper"]))
    draw = ImageDraw.Draw(image)
    x = y = _margin(page["width"])
    ink = tuple(page["ink"])
    for line in page["title"]:
        draw.text((x, y), line, font=_font(page["title_px"]), fill=ink)
        y += _line_height(page["title_px"])
    for lines in page["paragraphs"]:
        y += _line_height(page["body_px"])
        for line in lines:
            draw.text((x, y), line, font=_font(page["body_px"]), fill=ink)
            y += _line_height(page["body_px"])
    return png_bytes(image)


def _vocabulary(rng: np.random.Generator, size: DocumentSize) -> tuple[list[list[str]], list[list[str]], list[str]]:
    """Topic words per topic, keywords per page, and the filler words: disjoint sets."""
    pages = size.topics * size.pages_per_topic
    words = pseudo_words(rng, size.topics * TOPIC_WORDS + pages * KEYWORDS + 300)
    topics = [words[k * TOPIC_WORDS:(k + 1) * TOPIC_WORDS] for k in range(size.topics)]
    start = size.topics * TOPIC_WORDS
    keywords = [words[start + k * KEYWORDS:start + (k + 1) * KEYWORDS] for k in range(pages)]
    return topics, keywords, words[start + pages * KEYWORDS:]


def plan_documents(planner: SynthPlanner, size: DocumentSize) -> dict[str, Any]:
    """Plan the pages, queries and graded qrels; returns the settings for ``synth.json``."""
    rng = stream_rng(planner.seed, "eval/docs")
    topics, keywords, filler = _vocabulary(rng, size)
    corpus, queries, qrels = [], [], []
    for number, page_keywords in enumerate(keywords):
        topic_number = number // size.pages_per_topic
        topic = topics[topic_number]
        image = f"{PAGE_SET}/{number:06d}.png"
        page = plan_page(rng, size, filler, topic, page_keywords)
        schedule(planner, image, {"page": page}, {"page": page, "topic": topic_number, "topic_words": topic,
                                                  "keywords": page_keywords}, PAGE_SET)
        corpus.append({"id": f"page-{number:06d}", "image": image})
        words = [topic[int(rng.integers(TITLE_TOPIC_WORDS))], *page_keywords[:2]]
        queries.append({"id": f"q-{number:06d}", "text": " ".join(words[int(k)] for k in rng.permutation(3))})
    for number, query in enumerate(queries):
        topic_number = number // size.pages_per_topic
        for page in range(topic_number * size.pages_per_topic, (topic_number + 1) * size.pages_per_topic):
            grade = 2 if page == number else 1
            qrels.append({"query_id": query["id"], "corpus_id": corpus[page]["id"], "score": grade})
    tables = planner.plan.tables
    tables["eval/docs_queries.jsonl"], tables["eval/docs_corpus.jsonl"] = queries, corpus
    tables["eval/docs_qrels.jsonl"] = qrels
    add_eval_entry(planner, "SynthDocRet", "VR", "qrels", INSTRUCTIONS, queries="eval/docs_queries.jsonl",
                   corpus="eval/docs_corpus.jsonl", qrels="eval/docs_qrels.jsonl")
    return {**dataclasses.asdict(size), "pages": len(corpus), "queries": len(queries)}
