"""Where each MMEB-V2 task comes from: the one table of dataset id -> pinned revision, and the
task specs (hub dataset, config, split, frame archive) as the reference harness
(TIGER-AI-Lab/VLM2Vec, ``src/constant/dataset_hf_path.py`` and ``experiments/public/eval/*.yaml``)
reads them.

Revisions: every source is pinned to ``main``: the reference names no commit hashes and none
could be looked up offline when this table was written.  ``main`` is a branch, so a re-run may
read newer data; each conversion records the revision it used (``DIR/provenance.json``, the
task's ``manifest.json``).  Replace an entry with a commit hash to pin the content.
"""

from __future__ import annotations

from dataclasses import dataclass, field

FRAMES_REPO = "TIGER-Lab/MMEB-V2"  # frame tarballs (video-tasks/frames/*) and mmeb_v1.tar.gz (images)
IMAGE_REPO = "TIGER-Lab/MMEB-eval"  # the 36 image tasks' annotations (today's mmeb-eval converter)

REVISIONS: dict[str, str] = {
    FRAMES_REPO: "main", IMAGE_REPO: "main",
    **{f"VLM2Vec/{name}": "main" for name in (
        "MSR-VTT", "MSVD", "DiDeMo", "VATEX", "HMDB51", "UCF101", "Breakfast", "Kinetics-700", "SmthSmthV2",
        "QVHighlight", "Charades-STA", "MomentSeeker", "NExTQA", "EgoSchema", "MVBench", "Video-MME",
        "ActivityNetQA", "ViDoSeek", "ViDoSeek-page-fixed", "MMLongBench-doc", "MMLongBench-page-fixed")},
    "lmms-lab/YouCook2": "main",
    **{f"vidore/{name}": "main" for name in (
        "arxivqa_test_subsampled_beir", "docvqa_test_subsampled_beir", "infovqa_test_subsampled_beir",
        "tabfquad_test_subsampled_beir", "tatdqa_test_beir", "shiftproject_test_beir",
        "syntheticDocQA_artificial_intelligence_test_beir", "syntheticDocQA_energy_test_beir",
        "syntheticDocQA_government_reports_test_beir", "syntheticDocQA_healthcare_industry_test_beir",
        "esg_reports_human_labeled_v2", "biomedical_lectures_v2", "economics_reports_v2", "esg_reports_v2")},
    **{f"openbmb/VisRAG-Ret-Test-{name}": "main" for name in (
        "ArxivQA", "ChartQA", "MP-DocVQA", "SlideVQA", "InfoVQA", "PlotQA")},
}

MODALITIES: tuple[str, ...] = ("image", "video", "visdoc")
_CLS = ("video-tasks/frames/video_cls.tar.gz",)
_RET = ("video-tasks/frames/video_ret.tar.gz",)
_MRET = ("video-tasks/frames/video_mret.tar.gz",)
_QA = tuple(f"video-tasks/frames/video_qa.tar.gz-{k:02d}" for k in range(5))  # one archive in 5 parts
IMAGE_ARCHIVE = ("image-tasks/mmeb_v1.tar.gz",)


@dataclass(frozen=True)
class TaskSpec:
    """One task: its annotation set (``repo``/``config``/``split``) and, for video and image
    tasks, the frame/image archive of :data:`FRAMES_REPO` and the folder inside it."""

    name: str
    modality: str
    family: str  # the converter: video-ret, video-cls, ssv2, video-qa, moments, momentseeker, beir, image
    repo: str
    split: str
    config: str | None = None
    archives: tuple[str, ...] = ()
    prefix: str = ""  # the task's folder inside the archive
    columns: dict[str, str] = field(default_factory=dict)  # per-task column names (see the converters)

    def sources(self) -> list[dict[str, str | None]]:
        """The provenance record: every dataset read, with its pinned revision."""
        read = [{"repo": self.repo, "config": self.config, "split": self.split, "revision": REVISIONS[self.repo]}]
        if self.archives:
            read += [{"repo": FRAMES_REPO, "file": a, "revision": REVISIONS[FRAMES_REPO]} for a in self.archives]
        return read


def _ret(name: str, repo: str, split: str, video_id: str, text: str, config: str | None = None,
         prefix: str | None = None) -> TaskSpec:
    return TaskSpec(name, "video", "video-ret", repo, split, config, _RET, prefix or name,
                    {"video_id": video_id, "text": text})


def _qa(name: str, config: str | None = None, split: str = "test") -> TaskSpec:
    return TaskSpec(name, "video", "video-qa", f"VLM2Vec/{name}", split, config, _QA, f"video_qa/{name}")


VIDEO_TASKS: tuple[TaskSpec, ...] = (
    # classification: global over the label pool, except SmthSmthV2 (its own candidate list)
    TaskSpec("K700", "video", "video-cls", "VLM2Vec/Kinetics-700", "test", None, _CLS, "K700"),
    TaskSpec("SmthSmthV2", "video", "ssv2", "VLM2Vec/SmthSmthV2", "test", None, _CLS, "SSv2"),
    TaskSpec("HMDB51", "video", "video-cls", "VLM2Vec/HMDB51", "test", None, _CLS, "HMDB51"),
    TaskSpec("UCF101", "video", "video-cls", "VLM2Vec/UCF101", "test", None, _CLS, "UCF101"),
    TaskSpec("Breakfast", "video", "video-cls", "VLM2Vec/Breakfast", "test", None, _CLS, "Breakfast"),
    # question answering: local (the question's own options)
    _qa("MVBench", "*", split="train"), _qa("Video-MME"), _qa("NExTQA", "MC"), _qa("EgoSchema", "Subset"),
    _qa("ActivityNetQA"),
    # retrieval: text -> video over every clip of the task ("video_id" column; "stem:" = basename without suffix)
    _ret("DiDeMo", "VLM2Vec/DiDeMo", "test", "stem:video", "caption"),
    _ret("MSR-VTT", "VLM2Vec/MSR-VTT", "test", "video_id", "caption", config="test_1k"),
    _ret("MSVD", "VLM2Vec/MSVD", "test", "video_id", "first:caption"),
    _ret("VATEX", "VLM2Vec/VATEX", "test", "videoID", "first:enCap"),
    _ret("YouCook2", "lmms-lab/YouCook2", "val", "id", "sentence"),
    # moment retrieval: local (the video's own clips)
    TaskSpec("QVHighlight", "video", "moments", "VLM2Vec/QVHighlight", "test", None, _MRET,
             "video_mret/QVHighlight"),
    TaskSpec("Charades-STA", "video", "moments", "VLM2Vec/Charades-STA", "test", None, _MRET,
             "video_mret/Charades_STA"),
    TaskSpec("MomentSeeker", "video", "momentseeker", "VLM2Vec/MomentSeeker", "test", None, _MRET,
             "video_mret/MomentSeeker"),
)


def _beir(name: str, repo: str, split: str = "test") -> TaskSpec:
    return TaskSpec(name, "visdoc", "beir", repo, split)


_VIDORE_V1 = ("arxivqa_test_subsampled", "docvqa_test_subsampled", "infovqa_test_subsampled",
              "tabfquad_test_subsampled", "tatdqa_test", "shiftproject_test",
              "syntheticDocQA_artificial_intelligence_test", "syntheticDocQA_energy_test",
              "syntheticDocQA_government_reports_test", "syntheticDocQA_healthcare_industry_test")

VISDOC_TASKS: tuple[TaskSpec, ...] = (
    *(_beir("ViDoRe_" + n.removesuffix("_test").removesuffix("_test_subsampled"), f"vidore/{n}_beir")
      for n in _VIDORE_V1),
    # ViDoRe v2: the "_multilingual" tasks pool every language's queries (the reference filters on
    # the "language" column only for its English-only variants, which are not among the 78)
    _beir("ViDoRe_esg_reports_human_labeled_v2", "vidore/esg_reports_human_labeled_v2"),
    _beir("ViDoRe_biomedical_lectures_v2_multilingual", "vidore/biomedical_lectures_v2"),
    _beir("ViDoRe_economics_reports_v2_multilingual", "vidore/economics_reports_v2"),
    _beir("ViDoRe_esg_reports_v2_multilingual", "vidore/esg_reports_v2"),
    *(_beir(f"VisRAG_{n}", f"openbmb/VisRAG-Ret-Test-{n}", "train")
      for n in ("ArxivQA", "ChartQA", "MP-DocVQA", "SlideVQA", "InfoVQA", "PlotQA")),
    _beir("ViDoSeek-page", "VLM2Vec/ViDoSeek-page-fixed"), _beir("ViDoSeek-doc", "VLM2Vec/ViDoSeek"),
    _beir("MMLongBench-page", "VLM2Vec/MMLongBench-page-fixed"), _beir("MMLongBench-doc", "VLM2Vec/MMLongBench-doc"),
)


def image_tasks() -> tuple[TaskSpec, ...]:
    from vis_embed.data.taxonomy import MMEB_DATASETS

    return tuple(TaskSpec(name, "image", "image", IMAGE_REPO, "test", name, IMAGE_ARCHIVE, "MMEB")
                 for name in MMEB_DATASETS)


def all_tasks() -> dict[str, TaskSpec]:
    """Every MMEB-V2 task by name, in the reference's order (image 36, video 18, visdoc 24)."""
    return {spec.name: spec for spec in (*image_tasks(), *VIDEO_TASKS, *VISDOC_TASKS)}
