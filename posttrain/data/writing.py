"""Open-ended writing prompts: no reference answer and no rule that can check one. They
are scored by the generative reward model (verifier `grm`)."""

from __future__ import annotations

import random

from posttrain.config import WritingTasks
from posttrain.types import Message, Task

_FORMS = [
    "Write a short poem about {topic}.",
    "Explain {topic} to a ten-year-old in three sentences.",
    "Write a friendly email inviting a colleague to a talk about {topic}.",
    "Give three practical tips about {topic}, one line each.",
    "Write a four-sentence story in which {topic} plays a part.",
    "Argue for and against {topic} in one short paragraph each.",
    "Write a product description for a gadget related to {topic}.",
]
_TOPICS = [
    "rainy mornings",
    "learning to cook",
    "city gardens",
    "the night sky",
    "public libraries",
    "bicycles",
    "saving energy at home",
    "old maps",
    "team meetings",
    "sleep",
    "volcanoes",
    "board games",
    "recycling",
    "the first day at a new job",
    "mountain hiking",
    "honeybees",
    "writing clear emails",
    "street food",
]


def writing_tasks(source: WritingTasks) -> list[Task]:
    rng = random.Random(source.seed)
    system = (Message("system", source.system_prompt),) if source.system_prompt else ()
    tasks = []
    for i in range(source.size):
        form, topic = rng.choice(_FORMS), rng.choice(_TOPICS)
        tasks.append(
            Task(
                task_id=f"writing/{source.seed}/{i}",
                family="writing",
                messages=system + (Message("user", form.format(topic=topic)),),
                entry={"form": form, "topic": topic},
                verifier="grm",
            )
        )
    return tasks
